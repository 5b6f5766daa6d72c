// The AI SDK example in one command (`npm run example:ai-sdk`): the embedded Temporal dev server (history
// in .kvfabric/ai-sdk-example/temporal.db), the example's worker (worker.ts) with the default model on
// the CPU, and the research agent (workflows.ts) asked one question. It prints each step's tool calls
// and how many prompt tokens kvfabric continued and the model evaluated, then the answer, and stops.
// Keys are made for this run only; a real deployment has its own (kvfabric keygen, docs/operations.md).
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';

import { startDevServer } from '../../src/dev-server/dev-server';
import { KvFabricClientPlugin } from '../../src/plugin';
import { CodecKeyRing } from '../../src/security/payload-codec';
import { ed25519PublicOf, keyListText } from '../../src/security/key-list';
import { parseWorkerConfig } from '../../src/worker';
import { createResearchWorker } from './worker';
import type { researchAgent } from './workflows';

const DIR = join('.kvfabric', 'ai-sdk-example');
const TASK_QUEUE = 'ai-sdk-example';
const QUESTION = 'What does kvfabric keep for AI agents?';

async function main(): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  rmSync(DIR, { recursive: true, force: true }); // a fresh history each run
  mkdirSync(DIR, { recursive: true });
  const codecKeys = [{ id: 'example-codec', key: randomBytes(32) }];
  const env = {
    KVFABRIC_KEYS: `example=${randomBytes(32).toString('base64')}`,
    KVFABRIC_TRUSTED_KEYS: keyListText([{ id: 'example-sign', key: ed25519PublicOf(randomBytes(32)) }]),
    KVFABRIC_CODEC_KEYS: keyListText(codecKeys),
  };

  console.log('starting the Temporal dev server ...');
  const server = await startDevServer({ dbFile: join(DIR, 'temporal.db') });
  const connection = await NativeConnection.connect({ address: server.address });
  try {
    console.log('loading the model into the worker ...');
    const config = parseWorkerConfig(
      ['--address', server.address, '--task-queue', TASK_QUEUE, '--worker-id', 'example', '--engine', 'llama'].concat(
        ['--context-length', '2048', '--tier-dir', join(DIR, 'tiers')],
      ),
      { ...process.env, ...env },
    );
    const worker = await createResearchWorker(config, connection);
    const running = worker.run();
    try {
      const client = new Client({
        connection: await Connection.connect({ address: server.address }),
        plugins: [new KvFabricClientPlugin({ codec: new CodecKeyRing(codecKeys) })],
      });
      console.log(`asking the research agent: ${QUESTION}`);
      const steps = await client.workflow.execute<typeof researchAgent>('researchAgent', {
        taskQueue: TASK_QUEUE,
        workflowId: `research-${randomBytes(4).toString('hex')}`,
        args: [QUESTION],
      });
      for (const [i, step] of steps.entries()) {
        const did = step.toolCalls.length > 0 ? `called ${step.toolCalls.join(', ')}` : 'answered';
        console.log(`step ${i + 1}: ${did}; prompt tokens continued ${step.reusedTokens}, evaluated ${step.evaluatedTokens}`);
      }
      console.log(`answer: ${steps.at(-1)?.text.trim()}`);
      await client.connection.close();
    } finally {
      worker.shutdown();
      await running;
    }
  } finally {
    await connection.close();
    await server.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
