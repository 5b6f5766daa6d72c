// SIGKILL of a GPU worker process in the middle of an offload to disk, a restore from disk and a turn's
// append. The doomed worker (the worker's main in a child process) runs behind fixtures/pausing-worker.ts,
// which wraps ColdStore first (fixtures/pause-in-activity.ts): inside the named activity, after its first
// segment was written or read, it writes a flag file and stops there. The kill lands once the flag exists, so it is mid-operation every
// run. With the default durability (every turn writes the durable copy) a durable copy always exists: the
// agent's call completes on another worker after a failover, byte-exact, and release leaves no block and
// no file behind. The survivor sweeps orphan segments (those no manifest names, such as the one a worker
// killed between a segment and its manifest leaves) with a one-second age instead of the default hour.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';

import { afterAll, beforeAll, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric/errors';
import { AgentClient, type AgentConfigOverrides, type AgentHandle } from '../../src/client/agent-client';
import type { AgentStatus } from '../../src/workflows/definitions';
import { TEST_AGENT_CONFIG, TINY, eventually, expectedDigest, startCluster, type TestCluster } from '../temporal/harness';
import { BASELINE, contextFiles, poolBaseline } from './fault-checks';

const PAUSING_WORKER = join(__dirname, 'fixtures', 'pausing-worker.ts');

let cluster: TestCluster;
let flags: string;
const injected: string[] = [];

beforeAll(async () => {
  cluster = await startCluster();
  flags = mkdtempSync(join(tmpdir(), 'kvfabric-pause-'));
});
afterAll(async () => {
  console.log(`[kill-mid-operation] SIGKILLs injected mid-operation: ${injected.length} (${injected.join(', ')})`);
  await cluster?.close();
  rmSync(flags, { recursive: true, force: true });
});

/**
 * An agent on its own queue held by a doomed worker that pauses inside `activity`. `setup` runs before the
 * fatal call; `fatal` starts it. Kills the worker once paused, starts a survivor, and returns the call's
 * outcome with the survivor. Each scenario has its own queue, flag and workers, so they run concurrently.
 */
async function killDuring<Outcome>(
  activity: string,
  agentId: string,
  options: { skip?: number; config?: AgentConfigOverrides },
  setup: (agent: AgentHandle) => Promise<void>,
  fatal: (agent: AgentHandle) => Promise<Outcome>,
) {
  const queue = `kill-${activity}-${randomBytes(3).toString('hex')}`;
  const flag = join(flags, `${agentId}.paused`);
  // A tier directory of its own (shared by the doomed worker and the survivor): concurrent scenarios never see each other's files.
  const tierDir = join(flags, `${agentId}-tier`);
  const agents = new AgentClient(cluster.client, queue, cluster.agents.security);
  await cluster.startWorkflowWorker(queue);
  const doomed = await cluster.spawnWorker({
    workerId: `doomed-${activity}`,
    taskQueue: queue,
    args: ['--no-workflows', '--tier-dir', tierDir],
    env: { KVFABRIC_TEST_PAUSE_IN: activity, KVFABRIC_TEST_PAUSE_FLAG: flag, KVFABRIC_TEST_PAUSE_SKIP: String(options.skip ?? 0) },
    entry: PAUSING_WORKER,
  });
  const agent = await agents.start({ agentId, tenant: 'acme', model: TINY, config: options.config ?? TEST_AGENT_CONFIG });
  await setup(agent);
  expect((await agent.status()).holder).toBe(doomed.holder);

  const call = fatal(agent);
  call.catch(() => undefined); // awaited below; not unhandled while the worker dies
  await eventually(async () => (existsSync(flag) ? true : undefined), 30_000, `${activity} to pause mid-operation`);
  doomed.child.kill('SIGKILL');
  expect(await doomed.exited).toBe('SIGKILL');
  injected.push(`${activity} (${agentId})`);

  const survivor = await cluster.startWorker({
    config: { taskQueue: queue, workflows: false, tierDir, chores: { housekeepingMs: 250, orphanMinAgeMs: 1000 } },
  });
  const leftOver = (): string[] => contextFiles(tierDir);
  /** Every file of the agent gone (the orphan sweep included), or the files still there after 15 s. */
  const nothingLeft = async () =>
    eventually(
      async () => (leftOver().length === 0 ? true : undefined),
      15_000,
      `no files left in ${tierDir} (left: ${leftOver().join(', ')})`,
    );
  return { agent, outcome: await call, survivor, nothingLeft };
}

it.concurrent('kill -9 mid-offload over an older durable copy (durability on-offload): a typed error, never the older bytes', async () => {
  const id = 'killed-offload-stale';
  const config = { ...TEST_AGENT_CONFIG, durability: 'on-offload' as const };
  const { agent, outcome, survivor, nothingLeft } = await killDuring(
    'suspend',
    id,
    { skip: 1, config },
    async (a) => {
      await a.turn(40);
      await a.suspend('disk'); // durable copy: 40 tokens
      await a.resume();
      await a.turn(8); // only in the doomed worker's memory
    },
    (a) => a.suspend('disk').catch((err: unknown) => err as AgentStatus),
  );
  // The newer 8 tokens existed only in the killed worker's memory: the call fails, typed, and the agent
  // refuses to present the older 40-token copy as its context.
  expect(outcome).toBeInstanceOf(FabricError);
  console.log(
    `[kill-mid-operation] offload over an older copy: ${(outcome as unknown as FabricError).code}: ${(outcome as unknown as FabricError).message}`,
  );
  expect((outcome as unknown as FabricError).code).toBe('INVALID_STATE');
  // Never the older bytes: a resume either fails typed or brings back exactly the 48 tokens recorded.
  const resumed = await agent.resume().catch((err: unknown) => err);
  console.log(
    `[kill-mid-operation] resume after it: ${resumed instanceof FabricError ? `${resumed.code}: ${resumed.message}` : JSON.stringify({ tokens: (resumed as AgentStatus).tokens })}`,
  );
  if (resumed instanceof FabricError) expect(['INTEGRITY', 'INVALID_STATE']).toContain(resumed.code);
  else
    expect(resumed).toMatchObject({
      tokens: 48,
      digest: expectedDigest([
        [id, 0, 40],
        [id, 1, 8],
      ]),
    });
  await agent.release();
  expect(poolBaseline(survivor)).toEqual(BASELINE);
  await nothingLeft();
});

it.concurrent('kill -9 during a restore from disk: the resume completes on another worker, verified', async () => {
  const id = 'killed-restore';
  const { agent, outcome, survivor, nothingLeft } = await killDuring(
    'resume',
    id,
    {},
    async (a) => {
      await a.turn(56);
      await a.suspend('disk');
    },
    (a) => a.resume(),
  );
  expect(outcome).toMatchObject({ holder: survivor.holder, phase: 'resumed', tier: 'device', tokens: 56, failovers: 1 });
  expect(outcome.lastResume).toMatchObject({ from: 'disk' });
  expect(outcome.digest).toBe(expectedDigest([[id, 0, 56]]));
  expect(await agent.turn(4)).toMatchObject({ tokens: 60, turns: 2 });
  expect(await agent.status()).toMatchObject({
    tokens: 60,
    digest: expectedDigest([
      [id, 0, 56],
      [id, 1, 4],
    ]),
  });
  await agent.release();
  expect(poolBaseline(survivor)).toEqual(BASELINE);
  await nothingLeft();
});

it.concurrent("kill -9 during a turn's append (its durable copy half written): the turn is applied once, on another worker", async () => {
  const id = 'killed-append';
  const { agent, outcome, survivor, nothingLeft } = await killDuring(
    'turn',
    id,
    { skip: 1 },
    (a) => a.turn(37).then(() => undefined),
    (a) => a.turn(20),
  );
  const digest = expectedDigest([
    [id, 0, 37],
    [id, 1, 20],
  ]);
  expect(outcome).toMatchObject({ tokens: 57, turns: 2 });
  expect(await agent.status()).toMatchObject({ holder: survivor.holder, tier: 'device', tokens: 57, turns: 2, failovers: 1, digest });
  await agent.suspend('disk');
  expect((await agent.resume()).digest).toBe(digest);
  expect(await agent.turn(11)).toMatchObject({ tokens: 68, turns: 3 });
  expect(await agent.status()).toMatchObject({
    tokens: 68,
    digest: expectedDigest([
      [id, 0, 37],
      [id, 1, 20],
      [id, 2, 11],
    ]),
  });
  await agent.release();
  expect(poolBaseline(survivor)).toEqual(BASELINE);
  // The segment the killed worker wrote before its manifest goes with the survivor's orphan sweep.
  await nothingLeft();
});

it.concurrent('kill -9 mid-offload with no durable copy at all (durability on-offload): a typed error, never wrong bytes', async () => {
  const id = 'killed-offload-volatile';
  const config = { ...TEST_AGENT_CONFIG, durability: 'on-offload' as const };
  const { agent, outcome, survivor, nothingLeft } = await killDuring(
    'suspend',
    id,
    { config },
    async (a) => {
      await a.turn(64);
    },
    (a) => a.suspend('disk').catch((err: unknown) => err as AgentStatus),
  );
  expect(outcome).toBeInstanceOf(FabricError);
  expect(outcome).toMatchObject({ code: 'INTEGRITY', message: expect.stringContaining('manifest is missing') });
  // Nothing is left to adopt, so release ends what remains (grant, tokens, files) and the workflow completes.
  expect(await agent.release()).toMatchObject({ phase: 'released', tier: 'none' });
  expect(await cluster.agents.workflow(id).result()).toMatchObject({ phase: 'released' });
  await expect(agent.turn(1)).rejects.toMatchObject({ code: 'INVALID_STATE' });
  expect(poolBaseline(survivor)).toEqual(BASELINE);
  await nothingLeft();
});
