// The CLI as a user runs it: a dev server, a worker process (the synthetic engine, a tier directory of its
// own), fresh key files, a client for the test's own checks, and `cli` running the kvfabric command with
// the client's key files. What the CLI tests and the CLI attacks share.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { spawnWorkerProcess, type WorkerProcess } from '../../scripts/worker-process';
import { keygen } from '../../src/cli/keygen';
import { AgentClient } from '../../src/client/agent-client';
import { clientSecurityFromEnv } from '../../src/client/client-security';
import { startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { runCli } from './run-cli';

export interface CliRig {
  /** A folder removed by stop(): the keys and the worker's tier directory are in it. */
  scratch: string;
  tierDir: string;
  server: DevServer;
  worker: WorkerProcess;
  agents: AgentClient;
  /** The CLI as a process with the client's key files and this rig's connection flags; `env` adds to them. */
  cli(args: string[], env?: Record<string, string>): ReturnType<typeof runCli>;
  stop(): Promise<void>;
}

export async function startCliRig(name: string): Promise<CliRig> {
  const scratch = mkdtempSync(join(tmpdir(), `kvfabric-${name}-`));
  const keys = join(scratch, 'keys');
  const tierDir = join(scratch, 'tier');
  keygen(['--out', keys], () => undefined);
  const clientKeys = { KVFABRIC_SIGNING_KEYS_FILE: join(keys, 'signing.keys'), KVFABRIC_CODEC_KEYS_FILE: join(keys, 'codec.keys') };
  const workerKeys = {
    KVFABRIC_KEY_FILE: join(keys, 'master.keys'),
    KVFABRIC_TRUSTED_KEYS_FILE: join(keys, 'trusted.keys'),
    KVFABRIC_CODEC_KEYS_FILE: join(keys, 'codec.keys'),
  };
  const server = await startDevServer();
  const connection = ['--address', server.address, '--task-queue', name];
  const worker = await spawnWorkerProcess(
    name,
    [
      ...connection,
      ...['--engine', 'synthetic', '--model', 'tiny', '--backend', 'cpu'],
      ...['--device-blocks', '64', '--host-blocks', '64', '--tier-dir', tierDir],
    ],
    workerKeys,
  ).catch(async (error: unknown) => {
    await server.stop();
    throw error;
  });
  const agents = await AgentClient.connect({ address: server.address, namespace: 'default' }, clientSecurityFromEnv(clientKeys), name);
  return {
    scratch,
    tierDir,
    server,
    worker,
    agents,
    cli: (args, env = {}) => runCli([...args, ...connection], { ...clientKeys, ...env }),
    async stop() {
      await agents.close();
      worker.child.kill('SIGTERM');
      await worker.exited;
      await server.stop();
      rmSync(scratch, { recursive: true, force: true });
    },
  };
}
