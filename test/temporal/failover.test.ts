// Worker loss. GPU workers run as real child processes (src/worker/main.ts) holding agents' contexts;
// one is killed with SIGKILL, another is stopped with SIGTERM (graceful: it drains to the cold tier).
// The agents' next calls find the holder's queue unserved, and another worker adopts each context from
// the cold tier, restoring it byte-exact.
import { randomBytes } from 'node:crypto';

import { afterAll, beforeAll, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { TEST_AGENT_CONFIG, TINY, expectedDigest, recordHistory, startCluster, type TestCluster } from './harness';

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster();
});
afterAll(async () => cluster?.close());

it("restores a killed worker's agents from the cold tier on another worker", async () => {
  await cluster.startWorkflowWorker();
  const doomed = await cluster.spawnWorker({ workerId: 'doomed', args: ['--no-workflows'] });

  const migrant = await cluster.agents.start({ agentId: 'migrant', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  await migrant.turn(40);
  expect(await migrant.turn(8)).toMatchObject({ tokens: 48, turns: 2 });
  expect(await migrant.status()).toMatchObject({ holder: doomed.holder, tier: 'device', tokens: 48 });
  const sleeper = await cluster.agents.start({ agentId: 'sleeper', tenant: 'globex', model: TINY, config: TEST_AGENT_CONFIG });
  await sleeper.turn(20);
  expect(await sleeper.suspend('host')).toMatchObject({ holder: doomed.holder, phase: 'warm', tier: 'host' });
  const pinned = await cluster.agents.start({ agentId: 'pinned', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  await pinned.turn(24);
  expect(await pinned.pin()).toMatchObject({ holder: doomed.holder, pinned: true });

  const survivor = await cluster.startWorker({ config: { workflows: false } });
  doomed.child.kill('SIGKILL');
  expect(await doomed.exited).toBe('SIGKILL');

  // A turn on the lost worker's queue goes unserved; the context comes back from disk on the survivor.
  const started = Date.now();
  const turned = await migrant.turn(5);
  const failoverMs = Date.now() - started;
  expect(turned).toMatchObject({ tokens: 53, turns: 3 });
  const afterFailover = await migrant.status();
  expect(afterFailover).toMatchObject({ holder: survivor.holder, tier: 'device', tokens: 53, turns: 3, failovers: 1 });
  expect(afterFailover.digest).toBe(
    expectedDigest([
      ['migrant', 0, 40],
      ['migrant', 1, 8],
      ['migrant', 2, 5],
    ]),
  );
  expect(afterFailover.lastResume).toMatchObject({ from: 'disk' });
  console.log(
    `[failover] turn on a killed holder answered after ${failoverMs} ms (holder-loss timeout ${TEST_AGENT_CONFIG.timeouts!.holderLossMs} ms)`,
  );

  const resumed = await sleeper.resume();
  expect(resumed).toMatchObject({ holder: survivor.holder, tier: 'device', tokens: 20, failovers: 1, phase: 'resumed' });
  expect(resumed.digest).toBe(expectedDigest([['sleeper', 0, 20]]));

  // A pinned agent stays pinned on its new holder: the survivor's tiers never move it on their own.
  expect(await pinned.turn(4)).toMatchObject({ tokens: 28, turns: 2 });
  expect(await pinned.status()).toMatchObject({ holder: survivor.holder, pinned: true, tokens: 28, failovers: 1 });
  expect(survivor.memory.snapshot('pinned').pinned).toBe(true);
  expect(await pinned.unpin()).toMatchObject({ pinned: false });
  expect(survivor.memory.snapshot('pinned').pinned).toBe(false);

  await recordHistory(cluster.client, 'failover-turn', agentWorkflowId('migrant'));
  await recordHistory(cluster.client, 'failover-pinned', agentWorkflowId('pinned'));
  await migrant.release();
  await sleeper.release();
  await pinned.release();
});

it('drains a gracefully stopped worker to the cold tier, so nothing is lost even without per-turn durability', async () => {
  // A queue of its own, so no worker of the previous test takes this agent's placement.
  const queue = `drain-${randomBytes(3).toString('hex')}`;
  const agents = new AgentClient(cluster.client, queue, cluster.agents.security);
  await cluster.startWorkflowWorker(queue);
  const leaving = await cluster.spawnWorker({ workerId: 'leaving', taskQueue: queue, args: ['--no-workflows'] });
  const config = { ...TEST_AGENT_CONFIG, durability: 'on-offload' as const };
  const agent = await agents.start({ agentId: 'drained', tenant: 'acme', model: TINY, config });
  await agent.turn(33);
  expect(await agent.turn(7)).toMatchObject({ tokens: 40, turns: 2 });
  expect(await agent.status()).toMatchObject({ holder: leaving.holder, tier: 'device', tokens: 40 });

  leaving.child.kill('SIGTERM');
  expect(await leaving.exited).toBe(0);
  expect(leaving.output()).toMatch(/kvfabric GPU worker drained.*contexts: 1/s);

  const heir = await cluster.startWorker({ config: { taskQueue: queue, workflows: false } });
  const resumed = await agent.resume();
  expect(resumed).toMatchObject({ holder: heir.holder, tier: 'device', tokens: 40, failovers: 1 });
  expect(resumed.digest).toBe(
    expectedDigest([
      ['drained', 0, 33],
      ['drained', 1, 7],
    ]),
  );
  await agent.release();
});
