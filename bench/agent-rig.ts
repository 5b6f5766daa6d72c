// What agents are measured on: a Temporal dev server, an in-process GPU worker (CPU backend) and a client,
// with fresh keys for the tier, the capabilities and the payload codec. Shared by bench/resume.bench.ts
// and scripts/measure-agent.ts.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';

import { AgentClient } from '../src/client/agent-client';
import { startDevServer } from '../src/dev-server/dev-server';
import { CapabilityIssuer } from '../src/security/capability-issuer';
import { ed25519PublicOf } from '../src/security/key-list';
import { CodecKeyRing } from '../src/security/payload-codec';
import { createGpuWorker } from '../src/worker/gpu-worker';
import type { AgentModel } from '../src/workflows/definitions';

export interface AgentRig {
  agents: AgentClient;
  /** Resolves once the worker's write-behind (a model turn's save, append and durable copy) has run. */
  settled(): Promise<void>;
  close(): Promise<void>;
}

/**
 * `blocks`: device and host blocks each; `name` labels the task queue, worker and temp directory. The
 * synthetic engine by default (`model` sets the pool's shape); `engine: 'llama'` runs the default model
 * with `contextLength` tokens per context, the pool shaped by it.
 */
export async function startAgentRig(options: {
  name: string;
  model?: AgentModel;
  blocks: number;
  engine?: 'synthetic' | 'llama';
  contextLength?: number;
}): Promise<AgentRig> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const server = await startDevServer();
  const tierDir = fs.mkdtempSync(path.join(os.tmpdir(), `kvfabric-${options.name}-`));
  const signing = [{ id: 's', key: randomBytes(32) }];
  const codecKeys = [{ id: 'c', key: randomBytes(32) }];
  const connection = await NativeConnection.connect({ address: server.address });
  const taskQueue = `kvfabric-${options.name}`;
  const worker = await createGpuWorker({
    connection,
    config: {
      temporal: { address: server.address, namespace: 'default' },
      taskQueue,
      workerId: options.name,
      workflows: true,
      tierDir,
      pool: { backend: 'cpu', device: 0, deviceBlocks: options.blocks, hostBlocks: options.blocks },
      engine: {
        name: options.engine ?? 'synthetic',
        contextLength: options.contextLength ?? 4096,
        ...(options.model ? { model: options.model } : {}),
      },
      keys: {
        master: [{ id: 'k', key: randomBytes(32) }],
        activeMasterKeyId: 'k',
        trusted: signing.map(({ id, key }) => ({ id, key: ed25519PublicOf(key) })),
        codec: codecKeys,
        activeCodecKeyId: 'c',
      },
      chores: { housekeepingMs: 0, orphanMinAgeMs: 3_600_000 },
      maxConcurrentActivities: 8,
      shutdownGraceMs: 5000,
    },
  });
  const running = worker.run();
  const agents = await AgentClient.connect(
    { address: server.address, namespace: 'default' },
    { codec: new CodecKeyRing(codecKeys), issuer: new CapabilityIssuer(signing) },
    taskQueue,
  );
  return {
    agents,
    settled: () => worker.memory.settled(),
    async close() {
      await agents.close();
      worker.shutdown();
      await running;
      await connection.close();
      await server.stop();
      fs.rmSync(tierDir, { recursive: true, force: true });
    },
  };
}
