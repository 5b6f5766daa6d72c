// The agent workflow against the real dev server and an in-process GPU worker: the whole lifecycle with
// its timers, fork sharing, denials, idempotent retries, search attributes, metrics, and the history
// figures the issue asks for (events per turn, history size after 100 turns).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric/errors';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { FaultPlan, TEST_AGENT_CONFIG, TINY, eventually, expectedDigest, recordHistory, startCluster, type TestCluster } from './harness';

let cluster: TestCluster;
const faults = new FaultPlan();

beforeAll(async () => {
  cluster = await startCluster();
  await cluster.startWorker({ hooks: faults.hooks });
});
afterAll(async () => cluster?.close());

const SHORT_TIMERS = { ...TEST_AGENT_CONFIG, timers: { idleToWarmMs: 1200, warmToColdMs: 1200 } };
const bytesPerToken = 2 * 2 * 2 * 16 * 2;

describe('agent lifecycle', () => {
  it('runs created -> active <-> idle -> warm -> cold -> resumed -> released, with timers and a verified resume', async () => {
    const agent = await cluster.agents.start({ agentId: 'life-1', tenant: 'acme', model: TINY, config: SHORT_TIMERS });
    const created = await eventually(async () => ((await agent.status()).tier === 'device' ? agent.status() : undefined));
    expect(created).toMatchObject({ phase: 'created', tokens: 0, blocks: 0 });

    expect(await agent.turn(40)).toMatchObject({ tokens: 40, turns: 1 });
    expect(await agent.status()).toMatchObject({ phase: 'idle', tier: 'device', tokens: 40, blocks: 3, turns: 1 });
    await agent.turn(8);

    // idle -> warm -> cold on the timers alone.
    const warm = await eventually(async () => ((await agent.status()).phase === 'warm' ? agent.status() : undefined), 15_000, 'warm');
    expect(warm.tier).toBe('host');
    const cold = await eventually(async () => ((await agent.status()).phase === 'cold' ? agent.status() : undefined), 15_000, 'cold');
    expect(cold).toMatchObject({ tier: 'disk', tokens: 48 });
    // Timer moves publish the agent's search attributes too: the UI finds it among cold agents.
    const listed = await eventually(async () =>
      (await cluster.agents.list({ tier: 'disk', phase: 'cold' })).agents.find((a) => a.agentId === 'life-1'),
    );
    expect(listed).toMatchObject({ tenant: 'acme', tokens: 48, blocks: 3 });

    const resumed = await agent.resume();
    expect(resumed).toMatchObject({ phase: 'resumed', tier: 'device', tokens: 48 });
    expect(resumed.lastResume).toMatchObject({ from: 'disk' });
    expect(resumed.lastResume!.bytes).toBeGreaterThan(0);
    expect(resumed.digest).toBe(
      expectedDigest([
        ['life-1', 0, 40],
        ['life-1', 1, 8],
      ]),
    );

    expect(await agent.turn(3)).toMatchObject({ tokens: 51, turns: 3 });
    const active = await agent.status();
    expect(active).toMatchObject({ phase: 'idle', tokens: 51, turns: 3 });
    expect(active.digest).toBe(
      expectedDigest([
        ['life-1', 0, 40],
        ['life-1', 1, 8],
        ['life-1', 2, 3],
      ]),
    );

    const released = await agent.release();
    expect(released).toMatchObject({ phase: 'released', tier: 'none' });
    await expect(agent.turn(1)).rejects.toMatchObject({ code: 'INVALID_STATE' });
    await recordHistory(cluster.client, 'lifecycle-timers', agentWorkflowId('life-1'));
  });

  it('suspends on request and turns a cold agent back on with a verified resume first', async () => {
    const agent = await cluster.agents.start({ agentId: 'life-2', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    await agent.turn(20);
    expect(await agent.suspend('host')).toMatchObject({ phase: 'warm', tier: 'host' });
    expect(await agent.suspend('disk')).toMatchObject({ phase: 'cold', tier: 'disk' });
    expect(await agent.turn(4)).toMatchObject({ tokens: 24, turns: 2 });
    const next = await agent.status();
    expect(next).toMatchObject({ phase: 'idle', tier: 'device', tokens: 24 });
    expect(next.lastResume?.from).toBe('disk');
    expect(await agent.pin()).toMatchObject({ pinned: true });
    await expect(agent.suspend('disk')).rejects.toMatchObject({ code: 'INVALID_STATE' });
    expect(await agent.unpin()).toMatchObject({ pinned: false });
    await agent.release();
  });

  it('rejects invalid updates in the validator, before anything reaches history', async () => {
    const agent = await cluster.agents.start({ agentId: 'life-3', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    await agent.turn(1);
    const before = (await cluster.agents.workflow('life-3').describe()).historyLength;
    await expect(agent.turn(0)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(agent.fork('life-3')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(agent.suspend('gpu' as 'disk')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect((await cluster.agents.workflow('life-3').describe()).historyLength).toBe(before);
    await agent.release();
  });
});

describe('fork', () => {
  it("starts a child agent that shares the parent's prefix blocks copy-on-write, with its own identity", async () => {
    const parent = await cluster.agents.start({ agentId: 'planner', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    await parent.turn(40); // 3 blocks: two full, one holding 8 tokens
    const { child, status } = await parent.fork('researcher');
    expect(status).toMatchObject({ agentId: 'researcher', parentId: 'planner', tokens: 40, blocks: 3, sharedBlocks: 3, phase: 'created' });
    expect(child.capability).not.toBe(parent.capability);
    expect(await parent.status()).toMatchObject({ sharedBlocks: 3, forks: 1 });

    // The child writes into the shared, partly filled block: it gets its own copy; the full ones stay shared.
    expect(await child.turn(10)).toMatchObject({ tokens: 50, turns: 1 });
    const childAfter = await child.status();
    expect(childAfter).toMatchObject({ tokens: 50, blocks: 4, sharedBlocks: 2 });
    expect(await parent.turn(2)).toMatchObject({ tokens: 42, turns: 2 });
    const parentAfter = await parent.status();
    expect(parentAfter).toMatchObject({ tokens: 42, blocks: 3, sharedBlocks: 2 });
    expect(childAfter.digest).toBe(
      expectedDigest([
        ['planner', 0, 40],
        ['researcher', 0, 10],
      ]),
    );
    expect(parentAfter.digest).toBe(
      expectedDigest([
        ['planner', 0, 40],
        ['planner', 1, 2],
      ]),
    );

    // The child is an agent of its own: found by its search attributes, with its own workflow.
    const listed = await eventually(async () => {
      const found = (await cluster.agents.list({ tenant: 'acme' })).agents;
      return found.some((a) => a.agentId === 'researcher') ? found : undefined;
    });
    expect(listed.find((a) => a.agentId === 'researcher')).toMatchObject({ tenant: 'acme', status: 'RUNNING' });

    // Each side survives a round trip through disk byte-exact.
    await child.suspend('disk');
    await parent.suspend('disk');
    expect((await child.resume()).digest).toBe(childAfter.digest);
    expect((await parent.resume()).digest).toBe(parentAfter.digest);

    // One agent's capability does not open another agent's context, even in the same tenant.
    const impostor = cluster.agents.agent('planner', child.capability);
    await expect(impostor.turn(1)).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    await recordHistory(cluster.client, 'fork-parent', agentWorkflowId('planner'));
    await child.release();
    await parent.release();
    await recordHistory(cluster.client, 'fork-child', agentWorkflowId('researcher'));
  });
});

describe('fork that cannot start its child', () => {
  it('gives the child context back when the child workflow cannot start, and reports the fork failed', async () => {
    const parent = await cluster.agents.start({ agentId: 'fork-blocked', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    await parent.turn(40);
    // Something else already runs under the child's workflow id: startChild fails after share made the child context.
    const squatter = await cluster.client.workflow.start('agentWorkflow', {
      taskQueue: 'nobody-polls-this',
      workflowId: agentWorkflowId('fork-blocked-child'),
      args: [],
    });
    try {
      await expect(parent.fork('fork-blocked-child')).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        message: expect.stringContaining('cannot start agent fork-blocked-child'),
      });
      const holder = cluster.workers.find((w) => w.memory.holds('fork-blocked'))!;
      expect(holder.memory.holds('fork-blocked-child')).toBe(false);
      expect(await parent.status()).toMatchObject({ forks: 0, sharedBlocks: 0, tokens: 40 });
    } finally {
      await squatter.terminate();
    }
    await parent.release();
    await recordHistory(cluster.client, 'fork-failed', agentWorkflowId('fork-blocked'));
  });
});

describe('capabilities', () => {
  it('denies a resume by the wrong agent with PERMISSION_DENIED, non-retryable, and leaves the agent where it was', async () => {
    const owner = await cluster.agents.start({ agentId: 'owner', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    const other = await cluster.agents.start({ agentId: 'other', tenant: 'globex', model: TINY, config: TEST_AGENT_CONFIG });
    await owner.turn(30);
    await owner.suspend('disk');
    const started = Date.now();
    const denied = await cluster.agents
      .agent('owner', other.capability)
      .resume()
      .catch((err: unknown) => err);
    expect(denied).toBeInstanceOf(FabricError);
    expect(denied).toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(Date.now() - started).toBeLessThan(3000); // not retried
    expect(await owner.status()).toMatchObject({ phase: 'cold', tier: 'disk', denials: 1 });
    // The history shows one attempt of the denied restore.
    const history = await cluster.agents.workflow('owner').fetchHistory();
    const failed = history.events!.filter((e) => e.activityTaskFailedEventAttributes);
    expect(failed).toHaveLength(1);
    expect(failed[0]!.activityTaskFailedEventAttributes!.failure!.applicationFailureInfo).toMatchObject({
      type: 'PERMISSION_DENIED',
      nonRetryable: true,
    });
    expect((await owner.resume()).tokens).toBe(30);
    await recordHistory(cluster.client, 'denied-resume', agentWorkflowId('owner'));
    await owner.release();
    await other.release();
  });
});

describe('idempotency', () => {
  it('returns the recorded result when an activity is retried after its side effect', async () => {
    const agent = await cluster.agents.start({ agentId: 'retry-1', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    await agent.turn(10);
    // The turn runs locally (this worker holds the context and runs the workflow); its answer is lost after
    // it applied, and the holder's queue gets the same operation id, answered from the journal.
    faults.failOnceAfter('retry-1', 'turnIfHolder');
    expect(await agent.turn(7)).toMatchObject({ tokens: 17, turns: 2 });
    expect(faults.injected).toContainEqual(expect.stringMatching(/^retry-1\/turnIfHolder@/));
    const status = await agent.status();
    expect(status).toMatchObject({ tokens: 17, turns: 2 });
    expect(status.digest).toBe(
      expectedDigest([
        ['retry-1', 0, 10],
        ['retry-1', 1, 7],
      ]),
    );

    faults.failOnceAfter('retry-1', 'suspend');
    expect(await agent.suspend('disk')).toMatchObject({ tier: 'disk' });
    faults.failOnceAfter('retry-1', 'resume');
    expect(await agent.resume()).toMatchObject({ tier: 'device', tokens: 17, digest: status.digest });
    faults.failOnceAfter('retry-1', 'release');
    expect(await agent.release()).toMatchObject({ phase: 'released' });

    // The workflow retries calls on the holder itself (one attempt per activity, see HolderCalls.on): each
    // fault is one failed activity (the turn's: a failed local activity's marker), followed by the same
    // operation again, answered from the journal.
    const history = await cluster.agents.workflow('retry-1').fetchHistory();
    const failed = history.events!.filter((e) => e.activityTaskFailedEventAttributes);
    expect(failed).toHaveLength(3);
    const failedLocally = history.events!.filter((e) => e.markerRecordedEventAttributes?.failure);
    expect(failedLocally).toHaveLength(1);
    const queuedTurns = history.events!.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'turn');
    expect(queuedTurns).toHaveLength(1);
    await recordHistory(cluster.client, 'idempotent-retries', agentWorkflowId('retry-1'));
  });
});

describe('history', () => {
  it("answers a turn with the conversation's length alone: the rest of the agent's account is the status query's", async () => {
    const agent = await cluster.agents.start({ agentId: 'compact', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    const outcomes = [await agent.turn(12), await agent.turn(5), await agent.turn(3, { requestId: 'compact-1' })];
    // A turn's answer is recorded in the agent's history every turn: exactly these two keys, nothing undefined beside them.
    expect(outcomes).toStrictEqual([
      { turns: 1, tokens: 12 },
      { turns: 2, tokens: 17 },
      { turns: 3, tokens: 20 },
    ]);
    // A retried call answers the recorded result, no larger.
    expect(await agent.turn(3, { requestId: 'compact-1' })).toStrictEqual({ turns: 3, tokens: 20 });
    expect(await agent.status()).toMatchObject({
      agentId: 'compact',
      phase: 'idle',
      tier: 'device',
      turns: 3,
      tokens: 20,
      holder: cluster.workers[0]!.holder,
      failovers: 0,
    });
    await agent.release();
  });

  it('stays small: six events per hot turn, no KV bytes; prints the figures', async () => {
    // 100 turns of 24 tokens: 150 blocks, within one tenant's device quota (0.75 of the harness's 256).
    const tokensPerTurn = 24;
    const agent = await cluster.agents.start({ agentId: 'hundred', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    await agent.turn(tokensPerTurn);
    const handle = cluster.agents.workflow('hundred');
    const before = await handle.describe();
    for (let i = 1; i < 100; i++) await agent.turn(tokensPerTurn);
    const after = await handle.describe();
    const eventsPerTurn = (after.historyLength - before.historyLength) / 99;
    const bytesPerTurn = ((after.historySize ?? 0) - (before.historySize ?? 0)) / 99;
    const history = await handle.fetchHistory();
    const kinds = new Map<string, number>();
    for (const event of history.events!.slice(before.historyLength)) {
      const kind = Object.keys(event).find((k) => k.endsWith('EventAttributes')) ?? 'unknown';
      kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
    }
    console.log(
      `[history] 100 turns of ${tokensPerTurn} tokens (${(tokensPerTurn * bytesPerToken * 100) / 1024} KiB of KV): ` +
        `${after.historyLength} events, ${after.historySize} bytes; ${bytesPerTurn.toFixed(0)} bytes and ${eventsPerTurn.toFixed(2)} events per turn: ` +
        [...kinds].map(([k, n]) => `${k.replace('EventAttributes', '')} ${(n / 99).toFixed(2)}`).join(', '),
    );
    // The update's workflow task with the local turn's marker (docs/agents.md#a-turns-history).
    expect(eventsPerTurn).toBeLessThanOrEqual(6);
    expect(kinds.get('activityTaskScheduledEventAttributes')).toBeUndefined();
    expect(kinds.get('upsertWorkflowSearchAttributesEventAttributes')).toBeUndefined();
    // The 2 KiB target is judged by `npm run measure:agent`; this cluster's longer key ids and names add
    // some 60 bytes. The bound catches a turn's payloads growing back (a full status is 300 bytes more).
    expect(bytesPerTurn).toBeLessThan(2200);
    // No KV bytes: the history is far smaller than the KV it describes would be in any encoding.
    expect(after.historySize).toBeLessThan(tokensPerTurn * bytesPerToken * 100);
    await agent.release();
  });
});

describe('metrics', () => {
  it('serves pool use per tier, transfer bytes, evictions and denials beside the SDK metrics', async () => {
    const text = await eventually(async () => {
      const body = await (await fetch(`http://${cluster.metricsAddress}/metrics`)).text();
      return body.includes('kvfabric_denials') ? body : undefined;
    });
    expect(text).toMatch(/kvfabric_pool_blocks\{[^}]*tier="device"/);
    expect(text).toMatch(/kvfabric_pool_blocks\{[^}]*tier="host"/);
    expect(text).toMatch(/kvfabric_pool_blocks\{[^}]*tier="disk"/);
    expect(text).toMatch(/kvfabric_transfer_bytes\{[^}]*direction="to-disk"/);
    expect(text).toMatch(/kvfabric_denials\{[^}]*action="resume"/);
    expect(text).toMatch(/temporal_activity_execution_latency|temporal_request/);
  });
});
