// Unit tests of the agent workflow's lifecycle on Temporal's time-skipping test server, with stand-in
// activities (fixtures/mock-fabric.ts): the real agentWorkflow runs on a worker of the agents' queue
// (placement activities and the local resume), two holder workers serve their own queues, and a third
// holder queue has no worker at all. Hours of timers pass in a moment; what the tests read is which
// activity the workflow called, where, with what, and the status it reports.
import { ApplicationFailure } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { describe, expect, it } from 'vitest';

import type { TurnRequest } from '../../src/activities/types';
import {
  MAX_MESSAGE_CHARS,
  forkUpdate,
  pinUpdate,
  releaseUpdate,
  resumeUpdate,
  statusQuery,
  suspendUpdate,
  turnUpdate,
  unpinUpdate,
  renewUpdate,
  type AgentStatus,
} from '../../src/workflows/definitions';
import { KvBlocks, KvPhase, KvTier, KvTokens } from '../../src/workflows/search-attributes';
import {
  AGENTS_QUEUE,
  CAPABILITY,
  CONFIG,
  CUSTODIAN,
  HOLDER_A,
  HOLDER_B,
  HOLDER_GONE,
  HOUR,
  MINUTE,
  env,
  events,
  fabric,
  kindsOf,
  refusalOf,
  settled,
  skip,
  startAgent,
  turn,
  useAgentEnv,
} from './fixtures/agent-env';

useAgentEnv();

describe('timers', () => {
  it('moves an idle resident agent to host memory after idleToWarm, then to disk after warmToCold more', async () => {
    const agent = await startAgent('timers-idle');
    await settled(agent, (s) => s.holder === HOLDER_A);

    await skip(agent, 1 * HOUR - 5 * MINUTE);
    expect(fabric.callsOf('timers-idle', 'suspend')).toEqual([]);
    await skip(agent, 10 * MINUTE);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'warm', tier: 'host', holder: HOLDER_A });
    const suspends = fabric.callsOf('timers-idle', 'suspend');
    expect(suspends).toHaveLength(1);
    // The workflow demotes on its own, with the custodian token it carries.
    expect(suspends[0]).toMatchObject({ queue: HOLDER_A, request: { tier: 'host', capability: CUSTODIAN } });

    await skip(agent, 3 * HOUR - 10 * MINUTE);
    expect(fabric.callsOf('timers-idle', 'suspend')).toHaveLength(1);
    await skip(agent, 10 * MINUTE);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'cold', tier: 'disk' });
    expect(fabric.callsOf('timers-idle', 'suspend').map((call) => call.request.tier)).toEqual(['host', 'disk']);
  });

  it('counts idleness from the last turn: a turn before the idle timer fires pushes the demotion back', async () => {
    const agent = await startAgent('timers-turn');
    await settled(agent, (s) => s.holder === HOLDER_A);
    await skip(agent, 40 * MINUTE);
    await turn(agent, { tokens: 10 });

    // Past the first due time (60 min after the start), short of the new one (40 + 60 min).
    await skip(agent, 30 * MINUTE);
    expect(fabric.callsOf('timers-turn', 'suspend')).toEqual([]);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'idle', tier: 'device' });

    await skip(agent, 40 * MINUTE);
    expect(fabric.callsOf('timers-turn', 'suspend').map((call) => call.request.tier)).toEqual(['host']);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'warm', tier: 'host', tokens: 10 });
  });

  it('never demotes a pinned agent; unpinned, its idle timer runs again from the unpin', async () => {
    const agent = await startAgent('timers-pinned');
    await settled(agent, (s) => s.holder === HOLDER_A);
    await agent.executeUpdate(pinUpdate, { args: [{ capability: CAPABILITY }] });

    await skip(agent, 10 * HOUR);
    expect(fabric.callsOf('timers-pinned', 'suspend')).toEqual([]);
    expect(await agent.query(statusQuery)).toMatchObject({ pinned: true, tier: 'device' });

    await agent.executeUpdate(unpinUpdate, { args: [{ capability: CAPABILITY }] });
    await skip(agent, 1 * HOUR - 5 * MINUTE);
    expect(fabric.callsOf('timers-pinned', 'suspend')).toEqual([]);
    await skip(agent, 10 * MINUTE);
    expect(fabric.callsOf('timers-pinned', 'suspend').map((call) => call.request.tier)).toEqual(['host']);
  });
});

describe('failover', () => {
  it('adopts the context elsewhere when the holder no longer has it (STALE_HANDLE), pins it again and runs the call there once', async () => {
    const agent = await startAgent('failover-stale');
    // A later snapshot reporting an older durable version must not lower the one recover is asked for.
    fabric.reportDurableVersion('failover-stale', 'turn', 7);
    await turn(agent, { tokens: 20 });
    fabric.reportDurableVersion('failover-stale', 'pin', 3);
    await agent.executeUpdate(pinUpdate, { args: [{ capability: CAPABILITY }] });

    fabric.failNext(
      'failover-stale',
      'turn',
      ApplicationFailure.create({ type: 'STALE_HANDLE', message: 'no such context here', nonRetryable: true }),
    );
    expect(await turn(agent, { tokens: 8 })).toMatchObject({ tokens: 28, turns: 2 });

    const after = await agent.query(statusQuery);
    expect(after).toMatchObject({ holder: HOLDER_B, failovers: 1, pinned: true, tokens: 28, turns: 2, tier: 'device' });
    const recovers = fabric.callsOf('failover-stale', 'recover');
    expect(recovers).toHaveLength(1);
    expect(recovers[0]).toMatchObject({ queue: AGENTS_QUEUE, request: { epoch: 1, minVersion: 7, capability: CUSTODIAN } });
    expect(fabric.callsOf('failover-stale', 'turn').map((call) => call.queue)).toEqual([HOLDER_A, HOLDER_A, HOLDER_B]);
    // The pin died with the old holder: taken again on the new one, with the workflow's own token.
    expect(fabric.callsOf('failover-stale', 'pin').map((call) => [call.queue, call.request.capability])).toEqual([
      [HOLDER_A, CAPABILITY],
      [HOLDER_B, CUSTODIAN],
    ]);
    // Adopted from disk: brought back on the new holder before the turn, verified against the recorded digest.
    const resumes = fabric.callsOf('failover-stale', 'resume');
    expect(resumes.map((call) => call.queue)).toEqual([HOLDER_B]);
    expect(resumes[0]!.request.expected).toMatchObject({ tokens: 20 });
    expect(after.lastResume).toMatchObject({ from: 'disk' });
  });

  // The test server holds its clock while an activity task waits to be taken (so that a worker may take
  // it), so a schedule-to-start runs in wall time however the clock is skipped: this agent's is short.
  it("fails over when nobody serves the holder's queue for holderLossMs (schedule-to-start)", async () => {
    const holderLossMs = 1500;
    const agent = await startAgent(
      'failover-gone',
      { holder: HOLDER_GONE },
      { config: { ...CONFIG, timeouts: { ...CONFIG.timeouts, holderLossMs } } },
    );
    await settled(agent, (s) => s.holder === HOLDER_GONE);

    expect(await turn(agent, { tokens: 6 })).toMatchObject({ tokens: 6, turns: 1 });

    expect(await agent.query(statusQuery)).toMatchObject({
      holder: HOLDER_B,
      failovers: 1,
      tokens: 6,
      turns: 1,
      lastResume: { from: 'disk' },
    });
    expect(fabric.callsOf('failover-gone', 'recover')).toHaveLength(1);
    expect(fabric.callsOf('failover-gone', 'turn').map((call) => call.queue)).toEqual([HOLDER_B]);
    const history = await events(agent);
    const lost = history.filter((event) => event.activityTaskTimedOutEventAttributes);
    expect(lost).toHaveLength(1);
    expect(lost[0]!.activityTaskTimedOutEventAttributes!.failure?.timeoutFailureInfo?.timeoutType).toBe(
      temporal.api.enums.v1.TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START,
    );
    const scheduled = history.find(
      (event) => event.eventId?.toString() === lost[0]!.activityTaskTimedOutEventAttributes!.scheduledEventId?.toString(),
    );
    expect(scheduled?.activityTaskScheduledEventAttributes).toMatchObject({
      activityType: { name: 'turn' },
      taskQueue: { name: HOLDER_GONE },
    });
  });
});

describe('retries', () => {
  it('retries a retryable failure on the holder with the same operation id until it succeeds', async () => {
    const agent = await startAgent('retry-pool');
    fabric.failNext('retry-pool', 'turn', ApplicationFailure.create({ type: 'POOL_EXHAUSTED', message: 'no free blocks' }), 2);
    expect(await turn(agent, { tokens: 12 })).toMatchObject({ tokens: 12, turns: 1 });

    expect(await agent.query(statusQuery)).toMatchObject({ tokens: 12, turns: 1, failovers: 0, holder: HOLDER_A });
    const turns = fabric.callsOf('retry-pool', 'turn');
    expect(turns).toHaveLength(3);
    expect(new Set(turns.map((call) => call.queue))).toEqual(new Set([HOLDER_A]));
    expect(new Set(turns.map((call) => call.request.operationId)).size).toBe(1);
    expect(turns.map((call) => call.request.before)).toEqual([
      turns[0]!.request.before,
      turns[0]!.request.before,
      turns[0]!.request.before,
    ]);
    // The next call is a new operation.
    await turn(agent, { tokens: 1 });
    expect(fabric.callsOf('retry-pool', 'turn')[3]!.request.operationId).not.toBe(turns[0]!.request.operationId);
  });
});

describe('continue-as-new', () => {
  // The test server suggests continue-as-new at 4 MiB of history (or 4096 events): a few dozen turns of
  // the longest message the workflow admits, whose replies echo it, get there.
  it('continues as new when the server suggests it, carrying the state: no new allocation, the next operation ids', async () => {
    const agent = await startAgent('continued');
    const message = 'm'.repeat(MAX_MESSAGE_CHARS);
    let last: AgentStatus | undefined;
    let turns = 0;
    while (turns < 40) {
      await turn(agent, { message });
      turns++;
      last = await agent.query(statusQuery);
      if (last.run > 1) break;
    }
    // The turn that crossed the threshold ran in the first run; the hand-over follows it.
    const continued = await settled(agent, (s) => s.run === 2);
    expect(turns).toBeLessThan(40);
    expect(continued).toMatchObject({ turns, digest: last!.digest, holder: HOLDER_A, failovers: 0 });

    expect(await turn(agent, { message: 'after' })).toMatchObject({ turns: turns + 1, tokens: continued.tokens + 2 });
    expect(await agent.query(statusQuery)).toMatchObject({ run: 2, turns: turns + 1, tokens: continued.tokens + 2 });
    expect(fabric.callsOf('continued', 'allocate')).toHaveLength(1);
    const calls = fabric.callsOf('continued', 'turn');
    const sequence = calls.map((call) => Number(call.request.operationId.split(':').pop()));
    // allocate took operation 0; every turn took the next, across the two runs.
    expect(sequence).toEqual(calls.map((_, i) => i + 1));
    // The state carried over: the pages' digest and the last turn's token ids after it (the tail).
    const carried = calls.at(-1)!.request as unknown as TurnRequest;
    expect(carried.before).toMatchObject({ value: continued.digest });
    expect(carried.before.tokens + carried.tail!.length).toBe(continued.tokens);
    expect(carried.tail!.length).toBeGreaterThan(0);
    const first = await env.client.workflow.getHandle(agent.workflowId, agent.firstExecutionRunId).describe();
    expect(first.status.name).toBe('CONTINUED_AS_NEW');
  });
});

describe("a model turn's token ids (the tail)", () => {
  it('keeps them until the pages have them: the next call carries them, and a suspend settles them', async () => {
    const agent = await startAgent('tail-kept');
    const first = await turn(agent, { message: 'one two three four' });
    const second = await turn(agent, { message: 'five six' });
    expect(second.tokens).toBeGreaterThan(first.tokens);
    const turns = fabric.callsOf('tail-kept', 'turn');
    expect(turns[0]!.request.tail).toEqual([]);
    // The first turn's KV was not in the pages when its result came back: its ids ride with the second.
    expect(turns[1]!.request.tail).toEqual([1000, 1001, 1002, 1003, 1004]);
    expect(turns[1]!.request.before).toMatchObject({ tokens: 0 });

    await agent.executeUpdate(suspendUpdate, { args: [{ capability: CAPABILITY, tier: 'host' }] });
    const [suspend] = fabric.callsOf('tail-kept', 'suspend');
    expect(suspend!.request).toMatchObject({ expected: { tokens: 5 }, tail: [2000, 2001] });
    // Settled: the pages hold every token, and the next call carries no tail.
    await turn(agent, { message: 'seven' });
    expect(fabric.callsOf('tail-kept', 'turn').at(-1)!.request).toMatchObject({ tail: [], before: { tokens: 7 } });
  });

  it('hands them to the adopting worker after a failover, which the lost holder never saved', async () => {
    const agent = await startAgent('tail-failover');
    await turn(agent, { message: 'one two three four' });
    fabric.failNext(
      'tail-failover',
      'turn',
      ApplicationFailure.create({ type: 'STALE_HANDLE', message: 'no such context here', nonRetryable: true }),
    );
    expect(await turn(agent, { message: 'five six' })).toMatchObject({ turns: 2 });
    expect(await agent.query(statusQuery)).toMatchObject({ holder: HOLDER_B, failovers: 1, turns: 2 });
    // The new holder's resume and turn both got the first turn's ids: its pages never had them.
    const [resume] = fabric.callsOf('tail-failover', 'resume');
    expect(resume!.request).toMatchObject({ expected: { tokens: 0 }, tail: [1000, 1001, 1002, 1003, 1004] });
    const onB = fabric.callsOf('tail-failover', 'turn').filter((call) => call.queue === HOLDER_B);
    expect(onB.at(-1)!.request.tail).toEqual([1000, 1001, 1002, 1003, 1004]);
  });
});

describe('updates', () => {
  it('refuses an invalid update in its validator: nothing reaches the history or the holder', async () => {
    const agent = await startAgent('validated');
    await turn(agent, { tokens: 4 });
    const refused = await refusalOf(
      agent.executeUpdate(turnUpdate, { updateId: 'turn-with-both', args: [{ capability: CAPABILITY, tokens: 4, message: 'and words' }] }),
    );
    expect(refused).toMatchObject({ type: 'INVALID_ARGUMENT' });
    const suspendNowhere = await refusalOf(
      agent.executeUpdate(suspendUpdate, { updateId: 'suspend-nowhere', args: [{ capability: CAPABILITY, tier: 'moon' as 'host' }] }),
    );
    expect(suspendNowhere).toMatchObject({ type: 'INVALID_ARGUMENT' });

    const history = await events(agent);
    expect(history.filter((event) => event.workflowExecutionUpdateAcceptedEventAttributes)).toHaveLength(1);
    expect(history.filter((event) => event.workflowExecutionUpdateRejectedEventAttributes)).toHaveLength(0);
    expect(JSON.stringify(history)).not.toMatch(/turn-with-both|suspend-nowhere/);
    expect(fabric.callsOf('validated', 'turn')).toHaveLength(1);
    expect(fabric.callsOf('validated', 'suspend')).toHaveLength(0);
  });

  it('refuses every update queued behind a release with INVALID_STATE, then completes released', async () => {
    const agent = await startAgent('released');
    await turn(agent, { tokens: 4 });
    const releasing = fabric.hold('released', 'release');
    const release = agent.executeUpdate(releaseUpdate, { args: [{ capability: CAPABILITY }] });
    await releasing.reached;

    const credentials = { capability: CAPABILITY };
    const queued = await Promise.all([
      agent.startUpdate(turnUpdate, { args: [{ ...credentials, tokens: 1 }], waitForStage: 'ACCEPTED' }),
      agent.startUpdate(suspendUpdate, { args: [{ ...credentials, tier: 'host' }], waitForStage: 'ACCEPTED' }),
      agent.startUpdate(resumeUpdate, { args: [credentials], waitForStage: 'ACCEPTED' }),
      agent.startUpdate(forkUpdate, {
        args: [{ ...credentials, childId: 'released-child', childCapability: 'c', childCustodian: 'cc' }],
        waitForStage: 'ACCEPTED',
      }),
      agent.startUpdate(pinUpdate, { args: [credentials], waitForStage: 'ACCEPTED' }),
      agent.startUpdate(unpinUpdate, { args: [credentials], waitForStage: 'ACCEPTED' }),
      agent.startUpdate(renewUpdate, { args: [{ ...credentials, next: 'n', nextCustodian: 'nc' }], waitForStage: 'ACCEPTED' }),
      agent.startUpdate(releaseUpdate, { args: [credentials], waitForStage: 'ACCEPTED' }),
    ]);
    releasing.open();

    expect(await release).toMatchObject({ phase: 'released', tier: 'none', holder: null });
    for (const handle of queued) expect(await refusalOf(handle.result())).toMatchObject({ type: 'INVALID_STATE' });
    expect(await agent.result()).toMatchObject({ phase: 'released' });
    // Only the first release and the turn before it reached a worker.
    expect(fabric.callsOf('released').map((call) => call.activity)).toEqual(['allocate', 'turn', 'release']);
  });

  it('presents the revocation epoch of its allocation, then of its last renewal, with every later call, so a worker can tell a deleted epoch entry', async () => {
    const agent = await startAgent('renewing');
    await turn(agent, { tokens: 4 });
    const renew = (next: string) =>
      agent.executeUpdate(renewUpdate, { args: [{ capability: CAPABILITY, next, nextCustodian: `${next}-c` }] });
    await renew('n1');
    await renew('n2');
    await turn(agent, { tokens: 2 });
    await agent.executeUpdate(suspendUpdate, { args: [{ capability: CAPABILITY, tier: 'host' }] });
    const presented = fabric.callsOf('renewing').map((call) => [call.activity, call.request.revokedBelow]);
    expect(presented).toEqual([
      ['allocate', undefined],
      ['turn', 1],
      ['renew', 1],
      ['renew', 2],
      ['turn', 3],
      ['suspend', 3],
    ]);
    // A fork's child presents its own context's epoch (the fork's result) from its first call on.
    fabric.plan('renewing-child', { holder: HOLDER_A, recoverTo: HOLDER_B });
    const forked = await agent.executeUpdate(forkUpdate, {
      args: [{ capability: CAPABILITY, childId: 'renewing-child', childCapability: 'c', childCustodian: 'cc' }],
    });
    await turn(env.client.workflow.getHandle(forked.workflowId), { tokens: 3 });
    expect(fabric.callsOf('renewing-child').map((call) => [call.activity, call.request.revokedBelow])).toContainEqual(['turn', 1]);
  });

  it("hands a holder's PERMISSION_DENIED to the caller typed, once, and counts it", async () => {
    const agent = await startAgent('denied');
    await turn(agent, { tokens: 5 });
    fabric.failNext(
      'denied',
      'turn',
      ApplicationFailure.create({ type: 'PERMISSION_DENIED', message: 'capability is for another agent', nonRetryable: true }),
    );

    const refused = await refusalOf(agent.executeUpdate(turnUpdate, { args: [{ capability: 'someone-elses', tokens: 5 }] }));
    expect(refused).toMatchObject({ type: 'PERMISSION_DENIED', message: 'capability is for another agent' });
    expect(await agent.query(statusQuery)).toMatchObject({ denials: 1, turns: 1, tokens: 5, phase: 'idle', failovers: 0 });
    expect(fabric.callsOf('denied', 'turn')).toHaveLength(2);
    expect(fabric.callsOf('denied', 'recover')).toHaveLength(0);
  });
});

describe('local resume', () => {
  it("resumes in the workflow task when the worker running it holds the context: no activity on the holder's queue", async () => {
    const agent = await startAgent('local-here', { holder: HOLDER_A, holderRunsWorkflows: true });
    await turn(agent, { tokens: 9 });
    await agent.executeUpdate(suspendUpdate, { args: [{ capability: CAPABILITY, tier: 'host' }] });
    const before = (await events(agent)).length;

    const resumed = await agent.executeUpdate(resumeUpdate, { args: [{ capability: CAPABILITY }] });

    expect(resumed).toMatchObject({ phase: 'resumed', tier: 'device', tokens: 9, lastResume: { from: 'host' } });
    const local = fabric.callsOf('local-here', 'resumeIfHolder');
    expect(local).toHaveLength(1);
    expect(local[0]!.request).toMatchObject({ holder: HOLDER_A, capability: CAPABILITY, expected: { tokens: 9 } });
    expect(fabric.callsOf('local-here', 'resume')).toEqual([]);
    const during = (await events(agent)).slice(before);
    expect(during.filter((event) => event.markerRecordedEventAttributes)).toHaveLength(1);
    expect(during.filter((event) => event.activityTaskScheduledEventAttributes)).toEqual([]);
  });

  it("asks the holder's queue when the local resume answers null (the task ran elsewhere)", async () => {
    const agent = await startAgent('local-away', { holder: HOLDER_B, holderRunsWorkflows: true });
    await turn(agent, { tokens: 9 });
    await agent.executeUpdate(suspendUpdate, { args: [{ capability: CAPABILITY, tier: 'host' }] });

    const resumed = await agent.executeUpdate(resumeUpdate, { args: [{ capability: CAPABILITY }] });

    expect(resumed).toMatchObject({ phase: 'resumed', tier: 'device', tokens: 9, lastResume: { from: 'host' } });
    expect(fabric.callsOf('local-away', 'resumeIfHolder')).toHaveLength(1);
    expect(fabric.callsOf('local-away', 'resume').map((call) => call.queue)).toEqual([HOLDER_B]);
  });
});

describe('local turn', () => {
  it('turns a resident agent in the workflow task when the worker running it holds the context: six events, no upsert', async () => {
    const agent = await startAgent('hot-here', { holder: HOLDER_A, holderRunsWorkflows: true });
    await turn(agent, { tokens: 9 });
    const before = (await events(agent)).length;

    expect(await turn(agent, { tokens: 5 })).toMatchObject({ tokens: 14, turns: 2 });

    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'idle', tier: 'device', tokens: 14, turns: 2, holder: HOLDER_A });
    const local = fabric.callsOf('hot-here', 'turnIfHolder');
    expect(local).toHaveLength(2);
    expect(local[1]!.request).toMatchObject({ holder: HOLDER_A, capability: CAPABILITY, turn: 1, tokens: 5, before: { tokens: 9 } });
    expect(fabric.callsOf('hot-here', 'turn')).toEqual([]);
    // One workflow task carries the update's acceptance, the local activity's marker and the completion.
    expect(kindsOf((await events(agent)).slice(before))).toEqual([
      'workflowTaskScheduled',
      'workflowTaskStarted',
      'workflowTaskCompleted',
      'workflowExecutionUpdateAccepted',
      'markerRecorded',
      'workflowExecutionUpdateCompleted',
    ]);
  });

  it('publishes the search attributes when the agent moves, with the size it has then, not on a hot turn', async () => {
    const agent = await startAgent('hot-published', { holder: HOLDER_A, holderRunsWorkflows: true });
    await turn(agent, { tokens: 9 }); // created -> idle: a move
    await turn(agent, { tokens: 7 });
    await turn(agent, { tokens: 4 });
    await agent.executeUpdate(suspendUpdate, { args: [{ capability: CAPABILITY, tier: 'host' }] });

    const upserts = (await events(agent)).filter((event) => event.upsertWorkflowSearchAttributesEventAttributes);
    const published = upserts.map((event) =>
      Object.keys(event.upsertWorkflowSearchAttributesEventAttributes!.searchAttributes!.indexedFields!).sort(),
    );
    // The allocation (this test starts the workflow with none set), the first turn, the suspend.
    expect(published).toEqual([
      ['KvBlocks', 'KvPhase', 'KvTier', 'KvTokens'],
      ['KvBlocks', 'KvPhase', 'KvTokens'],
      ['KvBlocks', 'KvPhase', 'KvTier', 'KvTokens'],
    ]);
    const attributes = (await agent.describe()).typedSearchAttributes;
    expect([attributes.get(KvPhase), attributes.get(KvTier), attributes.get(KvTokens), attributes.get(KvBlocks)]).toEqual([
      'warm',
      'host',
      20,
      2,
    ]);
  });

  it("asks the holder's queue with the same operation id when the local turn answers null (the task ran elsewhere)", async () => {
    const agent = await startAgent('hot-away', { holder: HOLDER_B, holderRunsWorkflows: true });
    await settled(agent, (s) => s.holder === HOLDER_B);

    expect(await turn(agent, { tokens: 6 })).toMatchObject({ tokens: 6, turns: 1 });

    expect(await agent.query(statusQuery)).toMatchObject({ tokens: 6, turns: 1, holder: HOLDER_B });
    const local = fabric.callsOf('hot-away', 'turnIfHolder');
    const queued = fabric.callsOf('hot-away', 'turn');
    expect(local).toHaveLength(1);
    expect(queued.map((call) => call.queue)).toEqual([HOLDER_B]);
    expect(queued[0]!.request.operationId).toBe(local[0]!.request.operationId);
  });

  it("retries a local turn that failed on the holder's queue under the same operation id, so the worker's journal answers it", async () => {
    const agent = await startAgent('hot-retried', { holder: HOLDER_A, holderRunsWorkflows: true });
    await settled(agent, (s) => s.holder === HOLDER_A);
    fabric.failNext('hot-retried', 'turnIfHolder', ApplicationFailure.create({ type: 'POOL_EXHAUSTED', message: 'no free blocks' }));

    expect(await turn(agent, { tokens: 3 })).toMatchObject({ tokens: 3, turns: 1 });

    expect(await agent.query(statusQuery)).toMatchObject({ tokens: 3, turns: 1, failovers: 0, holder: HOLDER_A });
    const local = fabric.callsOf('hot-retried', 'turnIfHolder');
    const queued = fabric.callsOf('hot-retried', 'turn');
    expect(queued.map((call) => call.queue)).toEqual([HOLDER_A]);
    expect(queued[0]!.request.operationId).toBe(local[0]!.request.operationId);
    expect(queued[0]!.request.before).toEqual(local[0]!.request.before);
  });

  it("hands a local turn's PERMISSION_DENIED to the caller typed, once, counted, with nothing on the holder's queue", async () => {
    const agent = await startAgent('hot-denied', { holder: HOLDER_A, holderRunsWorkflows: true });
    await turn(agent, { tokens: 5 });
    fabric.failNext(
      'hot-denied',
      'turnIfHolder',
      ApplicationFailure.create({ type: 'PERMISSION_DENIED', message: 'capability is for another agent', nonRetryable: true }),
    );

    const refused = await refusalOf(agent.executeUpdate(turnUpdate, { args: [{ capability: 'someone-elses', tokens: 5 }] }));

    expect(refused).toMatchObject({ type: 'PERMISSION_DENIED', message: 'capability is for another agent' });
    expect(await agent.query(statusQuery)).toMatchObject({ denials: 1, turns: 1, tokens: 5, phase: 'idle', failovers: 0 });
    expect(fabric.callsOf('hot-denied', 'turnIfHolder')).toHaveLength(2);
    expect(fabric.callsOf('hot-denied', 'turn')).toEqual([]);
  });

  it('brings a warm agent back and turns it, both in the workflow task', async () => {
    const agent = await startAgent('hot-warm', { holder: HOLDER_A, holderRunsWorkflows: true });
    await turn(agent, { tokens: 8 });
    await agent.executeUpdate(suspendUpdate, { args: [{ capability: CAPABILITY, tier: 'host' }] });
    const before = (await events(agent)).length;

    expect(await turn(agent, { tokens: 2 })).toMatchObject({ tokens: 10, turns: 2 });

    expect(await agent.query(statusQuery)).toMatchObject({
      phase: 'idle',
      tier: 'device',
      tokens: 10,
      turns: 2,
      lastResume: { from: 'host' },
    });
    expect(fabric.callsOf('hot-warm').map((call) => `${call.queue}:${call.activity}`)).toEqual([
      `${AGENTS_QUEUE}:allocate`,
      'local:turnIfHolder',
      `${HOLDER_A}:suspend`,
      'local:resumeIfHolder',
      'local:turnIfHolder',
    ]);
    expect((await events(agent)).slice(before).filter((event) => event.activityTaskScheduledEventAttributes)).toEqual([]);
  });
});

describe('prefix sharing', () => {
  it("sends an agent's sharing 'none' with its turns, and nothing for the default (the worker's 'tenant')", async () => {
    const private_ = await startAgent('no-sharing', {}, { config: { ...CONFIG, sharing: 'none' } });
    await turn(private_, { message: 'hello' });
    const shared = await startAgent('default-sharing');
    await turn(shared, { message: 'hello' });
    const sent = (agentId: string) => (fabric.callsOf(agentId, 'turn').at(-1)!.request as unknown as TurnRequest).sharing;
    expect(sent('no-sharing')).toBe('none');
    expect(sent('default-sharing')).toBeUndefined();
  });
});
