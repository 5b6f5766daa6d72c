// The README's own worker (fixtures/readme-worker.ts: the plugin, the real model through node-llama-cpp,
// no signal handling of its own) stopped with SIGTERM while it holds an agent whose context exists only
// in its memory (durability 'on-offload'). node-llama-cpp loads signal-exit, which re-raises a signal
// nobody else listens to and so used to kill the process at once (exit 143, nothing drained). Now the
// process stays up until the context is on disk, says so, leaves through the user's own code (run()
// returns, exit 0), and another worker resumes the context byte-exact and continues the conversation.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';

import { afterAll, beforeAll, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { TEST_AGENT_CONFIG, eventually, startCluster, type TestCluster } from '../temporal/harness';

const README_WORKER = join(__dirname, 'fixtures', 'readme-worker.ts');
const LLAMA = ['--engine', 'llama', '--model', 'smollm2-135m', '--context-length', '512'];

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster();
});
afterAll(async () => cluster?.close());

it("drains the README worker's held context on SIGTERM, then another worker resumes it byte-exact", async () => {
  const queue = `readme-${randomBytes(3).toString('hex')}`;
  const agents = new AgentClient(cluster.client, queue, cluster.agents.security);
  const leaving = await cluster.spawnWorker({ workerId: 'readme-a', taskQueue: queue, entry: README_WORKER, args: LLAMA });
  // Without signal-exit listening, this test would prove nothing.
  await eventually(
    async () => (leaving.output().includes('signal-exit listening: true') ? true : undefined),
    10_000,
    'the worker to report signal-exit',
  );

  const timeouts = { ...TEST_AGENT_CONFIG.timeouts!, attemptMs: 120_000, operationMs: 240_000 };
  const agent = await agents.start({
    agentId: 'ada',
    tenant: 'acme',
    model: 'smollm2-135m',
    config: { ...TEST_AGENT_CONFIG, timeouts, durability: 'on-offload' },
  });
  const said = await agent.turn({ message: 'My name is Ada and I design bridges.', generation: { maxTokens: 8 } });
  expect(said).toMatchObject({ turns: 1 });
  const afterSaid = await agent.status();
  expect(afterSaid).toMatchObject({ holder: leaving.holder, tier: 'device', turns: 1, tokens: said.tokens });

  leaving.child.kill('SIGTERM');
  expect(await leaving.exited).toBe(0); // not 'SIGTERM': signal-exit did not re-raise it
  const log = leaving.output();
  expect(log).toMatch(/kvfabric GPU worker stopping on SIGTERM.*contexts: 1/s);
  expect(log).toMatch(/kvfabric GPU worker drained.*contexts: 1,.*failed: 0/s);
  expect(log).toContain('worker.run() returned');

  const heir = await cluster.spawnWorker({ workerId: 'readme-b', taskQueue: queue, entry: README_WORKER, args: LLAMA });
  const resumed = await agent.resume();
  // The turn's KV reached the pages after its reply (write-behind) and went to disk with the drain: the
  // resumed pages hold the whole conversation, so their digest is past the one recorded right after the turn.
  expect(resumed).toMatchObject({ holder: heir.holder, tier: 'device', tokens: said.tokens, failovers: 1 });
  expect(resumed.digest).not.toBe(afterSaid.digest);
  expect(resumed.lastResume).toMatchObject({ from: 'disk' });
  const next = await agent.turn({ message: 'What is my name?', generation: { maxTokens: 8 } });
  expect(next).toMatchObject({ turns: 2 });
  expect(await agent.status()).toMatchObject({ holder: heir.holder, turns: 2, tokens: next.tokens });
  expect(next.tokens).toBeGreaterThan(said.tokens);
  await agent.release();
  heir.child.kill('SIGTERM');
  expect(await heir.exited).toBe(0);
}, 300_000);
