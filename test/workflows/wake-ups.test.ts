// Planned wake-ups on Temporal's time-skipping test server, with stand-in activities (fixtures/mock-fabric.ts):
// an agent's context goes down to disk under the idle timers, its owner plans the wake-up (the signal from a
// user's workflow that naps with sleepThenWake, or the update from a client), and the agent's workflow
// brings it back ahead of time with its custodian token, through the holder's `wake`. Hours pass in a
// moment; the tests read which activity ran where, the agent's status, and its history, which they replay
// (`KVFABRIC_RECORD_HISTORIES=test/workflows/histories` writes them as the recorded ones).
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

import type { WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';

import { agentWorkflowId } from '../../src/identity/agent-identity';
import { custodyProof, statusQuery, suspendUpdate, wakeUpdate, type AgentWorkflow, type WakeArgs } from '../../src/workflows/definitions';
import { WAKE_LEAD_FLOOR_MS } from '../../src/workflows/lead-time';
import { KvPhase, KvTier } from '../../src/workflows/search-attributes';
import {
  AGENTS_QUEUE,
  CAPABILITY,
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
  type HistoryEvent,
} from './fixtures/agent-env';
import { recordHistory } from '../temporal/harness';
import type { napThenWake } from './fixtures/owner-workflows';

const WORKFLOWS = require.resolve('./fixtures/owner-workflows.ts');
const HISTORIES = join(__dirname, 'histories');
useAgentEnv(WORKFLOWS);

/** The agents of this file's tests, whose histories the replay test replays. */
const recorded: { name: string; handle: WorkflowHandle<AgentWorkflow> }[] = [];

/** An agent with a 40-token context, left by its idle timers on disk (idle 1 h, then 3 h warm). */
async function agentOnDisk(agentId: string, plan: Parameters<typeof startAgent>[1] = {}): Promise<WorkflowHandle<AgentWorkflow>> {
  const agent = await startAgent(agentId, plan, {}, agentWorkflowId(agentId));
  recorded.push({ name: agentId, handle: agent });
  await turn(agent, { tokens: 40 });
  await skip(agent, 4 * HOUR + MINUTE);
  expect(await agent.query(statusQuery)).toMatchObject({ phase: 'cold', tier: 'disk' });
  return agent;
}

/** A prefetch through the holder's queue: the timer's firing and its task, the activity `wake`, the task that takes its result. */
const PREFETCH_ON_HOLDER_QUEUE = [
  'timerFired',
  'workflowTaskScheduled',
  'workflowTaskStarted',
  'workflowTaskCompleted',
  'activityTaskScheduled',
  'activityTaskStarted',
  'activityTaskCompleted',
  'workflowTaskScheduled',
  'workflowTaskStarted',
  'workflowTaskCompleted',
];

/** Plans (or with null cancels) the agent's wake-up as its owner: the proof of the custodian token the workflow carries. */
function planWake(agent: WorkflowHandle<AgentWorkflow>, at: number | null, custodian = CUSTODIAN) {
  return agent.executeUpdate(wakeUpdate, { args: [{ at, proof: custodyProof(custodian) }] });
}

describe('a planned wake-up', () => {
  it("finds the context in the engine after hours of sleep: a user's workflow naps with sleepThenWake, the agent prefetches", async () => {
    const agent = await agentOnDisk('wake-nap');
    const napStart = await env.currentTimeMs();
    const owner = await env.client.workflow.start<typeof napThenWake>('napThenWake', {
      taskQueue: AGENTS_QUEUE,
      workflowId: 'owner-of-wake-nap',
      args: [{ agentId: 'wake-nap', capability: CUSTODIAN }, 8 * HOUR],
    });
    const planned = await settled(agent, (status) => status.wake !== undefined);
    expect(planned.wake!.at).toBeGreaterThanOrEqual(napStart + 8 * HOUR);
    expect(planned.wake!.leadMs).toBe(WAKE_LEAD_FLOOR_MS); // 40 tokens of the tiny model: the floor
    const before = (await events(agent)).length;

    await skip(agent, 8 * HOUR - 2 * WAKE_LEAD_FLOOR_MS);
    expect(fabric.callsOf('wake-nap', 'wake')).toEqual([]);
    expect(await agent.query(statusQuery)).toMatchObject({ tier: 'disk' });
    await skip(agent, WAKE_LEAD_FLOOR_MS + 500);

    // Before the owner wakes, the context is back, brought by the agent's workflow with its custodian token.
    const status = await agent.query(statusQuery);
    expect(status).toMatchObject({ phase: 'idle', tier: 'device', tokens: 40, lastResume: { from: 'disk' } });
    expect(status.wake).toBeUndefined();
    expect(fabric.callsOf('wake-nap', 'wake')).toMatchObject([
      { queue: HOLDER_A, request: { capability: CUSTODIAN, expected: { tokens: 40 } } },
    ]);
    const prefetch = kindsOf((await events(agent)).slice(before));
    expect(prefetch).toEqual([...PREFETCH_ON_HOLDER_QUEUE, 'upsertWorkflowSearchAttributes']);

    // Past the owner's wake-up (not its result(), which lets the test server skip on to the idle timer).
    await skip(agent, WAKE_LEAD_FLOOR_MS);
    expect((await owner.describe()).status.name).toBe('COMPLETED');
    // The owner's first call is hot: no resume of its own, and it moves the agent nowhere (no search attributes).
    const beforeCall = (await events(agent)).length;
    expect(await turn(agent, { tokens: 4 })).toMatchObject({ turns: 2, tokens: 44 });
    expect(fabric.callsOf('wake-nap', 'resume')).toEqual([]);
    expect(kindsOf((await events(agent)).slice(beforeCall))).not.toContain('upsertWorkflowSearchAttributes');
  });

  it('prefetches in the workflow task when the worker running it holds the context: one marker, no activity task, no timer started', async () => {
    const agent = await agentOnDisk('wake-local', { holder: HOLDER_A, holderRunsWorkflows: true });
    const at = (await env.currentTimeMs()) + 2 * HOUR;
    const beforePlan = (await events(agent)).length;
    await planWake(agent, at);
    const before = (await events(agent)).length;
    // The plan starts the prefetch's timer and the idle timer that will follow the prefetch.
    expect(kindsOf((await events(agent)).slice(beforePlan))).toEqual([
      'workflowTaskScheduled',
      'workflowTaskStarted',
      'workflowTaskCompleted',
      'workflowExecutionUpdateAccepted',
      'workflowExecutionUpdateCompleted',
      'timerStarted',
      'timerStarted',
    ]);
    await skip(agent, 2 * HOUR);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'idle', tier: 'device', lastResume: { from: 'disk' } });
    expect(fabric.callsOf('wake-local', 'wakeIfHolder')).toMatchObject([{ queue: 'local', request: { capability: CUSTODIAN } }]);
    expect(fabric.callsOf('wake-local', 'wake')).toEqual([]);
    // Temporal's floor for a timer that leads to work, the local activity's marker, and the tier published.
    expect(kindsOf((await events(agent)).slice(before))).toEqual([
      'timerFired',
      'workflowTaskScheduled',
      'workflowTaskStarted',
      'workflowTaskCompleted',
      'markerRecorded',
      'upsertWorkflowSearchAttributes',
    ]);
    // The idle timer the plan started is the one that takes the unused context down, an hour after the instant.
    const prefetched = (await events(agent)).length;
    await skip(agent, 1 * HOUR + MINUTE);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'warm', tier: 'host' });
    expect(kindsOf((await events(agent)).slice(prefetched)).slice(0, 4)).toEqual([
      'timerFired',
      'workflowTaskScheduled',
      'workflowTaskStarted',
      'workflowTaskCompleted',
    ]);
  });

  it('lets a prefetched context nobody uses fall back under the idle timers, counted from the planned instant', async () => {
    const agent = await agentOnDisk('wake-unused');
    const at = (await env.currentTimeMs()) + 2 * HOUR;
    await planWake(agent, at);
    await skip(agent, 2 * HOUR);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'idle', tier: 'device' });
    await skip(agent, 1 * HOUR - MINUTE);
    expect(await agent.query(statusQuery)).toMatchObject({ tier: 'device' });
    await skip(agent, 2 * MINUTE);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'warm', tier: 'host' });
  });

  it('does nothing once cancelled: the context stays where the timers left it', async () => {
    const agent = await agentOnDisk('wake-cancelled');
    const at = (await env.currentTimeMs()) + 5 * HOUR;
    expect((await planWake(agent, at)).wake).toMatchObject({ at });
    expect((await planWake(agent, null)).wake).toBeUndefined();
    await skip(agent, 6 * HOUR);
    expect(fabric.callsOf('wake-cancelled', 'wake')).toEqual([]);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'cold', tier: 'disk' });
  });

  it('follows a moved plan: nothing at the first instant, the prefetch before the second', async () => {
    const agent = await agentOnDisk('wake-moved');
    const now = await env.currentTimeMs();
    await planWake(agent, now + 2 * HOUR);
    await planWake(agent, now + 5 * HOUR);
    await skip(agent, 3 * HOUR);
    expect(fabric.callsOf('wake-moved', 'wake')).toEqual([]);
    await skip(agent, 2 * HOUR);
    expect(fabric.callsOf('wake-moved', 'wake')).toHaveLength(1);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'idle', tier: 'device' });

    // Moved again after its prefetch: the context falls back under the idle timers from the move.
    const moved = await env.currentTimeMs();
    await planWake(agent, moved + 10 * HOUR);
    await skip(agent, 1 * HOUR + MINUTE);
    expect(await agent.query(statusQuery)).toMatchObject({ phase: 'warm', tier: 'host' });
  });

  it('with room on the device for one of two agents waking at once, brings one back and the other up to host memory', async () => {
    const first = await agentOnDisk('wake-room-1');
    const second = await agentOnDisk('wake-room-2');
    fabric.deviceRoom = fabric.residentCount() + 1;
    try {
      const at = (await env.currentTimeMs()) + 3 * HOUR;
      await planWake(first, at);
      await planWake(second, at);
      await skip(first, 3 * HOUR);
      await skip(second, 0);
      const statuses = [await first.query(statusQuery), await second.query(statusQuery)];
      expect(statuses.map((status) => status.tier).sort()).toEqual(['device', 'host']);
      // The one left behind is warm in host memory, as after an idle timer, and its listing says so.
      const [behind, behindId] = statuses[0]!.tier === 'host' ? [first, 'wake-room-1'] : [second, 'wake-room-2'];
      expect(await behind.query(statusQuery)).toMatchObject({ phase: 'warm', tokens: 40 });
      const attributes = (await behind.describe()).typedSearchAttributes;
      expect([attributes.get(KvPhase), attributes.get(KvTier)]).toEqual(['warm', 'host']);
      expect(fabric.callsOf('wake-room-1', 'wake')).toHaveLength(1);
      expect(fabric.callsOf('wake-room-2', 'wake')).toHaveLength(1);
      // Its own call brings it back from there: the resume it pays starts in host memory.
      fabric.deviceRoom = Infinity;
      expect(fabric.callsOf(behindId, 'resume')).toEqual([]);
      expect(await turn(behind, { tokens: 2 })).toMatchObject({ tokens: 42 });
      expect(await behind.query(statusQuery)).toMatchObject({ tier: 'device', lastResume: { from: 'host' } });
      expect(fabric.callsOf(behindId, 'resume')).toHaveLength(1);
    } finally {
      fabric.deviceRoom = Infinity;
    }
  });

  it('lets a context prefetched only to host memory and never used go back to disk under the warm timer, from the planned instant', async () => {
    const agent = await agentOnDisk('wake-host-unused');
    fabric.deviceRoom = fabric.residentCount();
    try {
      const at = (await env.currentTimeMs()) + 2 * HOUR;
      await planWake(agent, at);
      await skip(agent, 2 * HOUR);
      expect(await agent.query(statusQuery)).toMatchObject({ phase: 'warm', tier: 'host' });
      // Started at the prefetch, ahead of the instant, the warm timer is due warmToColdMs after the instant
      // (to within the task's own length: an event's time is its task's completion).
      const warm = (await events(agent)).filter((event) => event.timerStartedEventAttributes).at(-1)!;
      const due = msOf(warm.eventTime!) + msOf(warm.timerStartedEventAttributes!.startToFireTimeout!);
      expect(Math.abs(due - (at + 3 * HOUR))).toBeLessThan(WAKE_LEAD_FLOOR_MS / 4);
      await skip(agent, 3 * HOUR - MINUTE);
      expect(await agent.query(statusQuery)).toMatchObject({ phase: 'warm', tier: 'host' });
      await skip(agent, 2 * MINUTE);
      expect(await agent.query(statusQuery)).toMatchObject({ phase: 'cold', tier: 'disk' });
      expect(fabric.callsOf('wake-host-unused', 'suspend').at(-1)).toMatchObject({ request: { tier: 'disk' } });
    } finally {
      fabric.deviceRoom = Infinity;
    }
  });

  it('with no room on the device nor in host memory, leaves the context on disk, its record untouched', async () => {
    const agent = await agentOnDisk('wake-no-room');
    fabric.deviceRoom = fabric.residentCount();
    fabric.hostRoom = fabric.countOn('host');
    try {
      await planWake(agent, (await env.currentTimeMs()) + 2 * HOUR);
      const before = (await events(agent)).length;
      await skip(agent, 2 * HOUR);
      expect(fabric.callsOf('wake-no-room', 'wake')).toHaveLength(1);
      expect(await agent.query(statusQuery)).toMatchObject({ phase: 'cold', tier: 'disk', tokens: 40 });
      // Nothing moved, so nothing is published; the idle timer started with the plan is cancelled.
      expect(kindsOf((await events(agent)).slice(before))).toEqual([...PREFETCH_ON_HOLDER_QUEUE, 'timerCanceled']);
    } finally {
      fabric.deviceRoom = Infinity;
      fabric.hostRoom = Infinity;
    }
  });

  it('prefetches on the worker that adopts the context when the holder is gone', async () => {
    const agent = await agentOnDisk('wake-gone', { holder: HOLDER_GONE, recoverTo: HOLDER_B });
    await planWake(agent, (await env.currentTimeMs()) + 2 * HOUR);
    await skip(agent, 2 * HOUR);
    await settled(agent, (status) => status.tier === 'device');
    expect(await agent.query(statusQuery)).toMatchObject({ holder: HOLDER_B, failovers: 1, phase: 'idle' });
    expect(fabric.callsOf('wake-gone', 'recover')).toHaveLength(1);
    expect(fabric.callsOf('wake-gone', 'wake').map((call) => call.queue)).toEqual([HOLDER_B]);
  });

  it('fails over between the prefetch and the wake-up: the call finds the holder gone and runs on the adopting worker', async () => {
    const agent = await agentOnDisk('wake-failover');
    await planWake(agent, (await env.currentTimeMs()) + 2 * HOUR);
    await skip(agent, 2 * HOUR);
    expect(await agent.query(statusQuery)).toMatchObject({ tier: 'device', holder: HOLDER_A });
    // The holder died after the prefetch: it no longer has the context.
    fabric.failNext('wake-failover', 'turn', ApplicationFailure.create({ type: 'STALE_HANDLE', message: 'gone', nonRetryable: true }));
    expect(await turn(agent, { tokens: 3 })).toMatchObject({ turns: 2, tokens: 43 });
    expect(await agent.query(statusQuery)).toMatchObject({ holder: HOLDER_B, failovers: 1 });
  });

  it('is refused to anyone but the owner, and to a bad instant, before anything reaches the history', async () => {
    const agent = await startAgent('wake-refused', {}, {}, agentWorkflowId('wake-refused'));
    await turn(agent, { tokens: 5 });
    const before = (await events(agent)).length;
    const at = (await env.currentTimeMs()) + HOUR;
    expect(await refusalOf(planWake(agent, at, CAPABILITY))).toMatchObject({ type: 'PERMISSION_DENIED' });
    expect(await refusalOf(planWake(agent, at, 'header.claims.signature-of-another-agents-custodian'))).toMatchObject({
      type: 'PERMISSION_DENIED',
    });
    expect(await refusalOf(agent.executeUpdate(wakeUpdate, { args: [{ at } as WakeArgs] }))).toMatchObject({ type: 'PERMISSION_DENIED' });
    expect(await refusalOf(planWake(agent, -1))).toMatchObject({ type: 'INVALID_ARGUMENT' });
    expect(await refusalOf(planWake(agent, at + 400 * 24 * HOUR))).toMatchObject({ type: 'INVALID_ARGUMENT' });
    expect(await refusalOf(planWake(agent, 1.5))).toMatchObject({ type: 'INVALID_ARGUMENT' });
    // The test server writes each refusal's workflow task; no update, signal or timer reaches the history.
    const after = kindsOf((await events(agent)).slice(before));
    expect(after.filter((kind) => !kind.startsWith('workflowTask'))).toEqual([]);
    expect((await agent.query(statusQuery)).wake).toBeUndefined();
    await agent.executeUpdate(suspendUpdate, { args: [{ capability: CAPABILITY, tier: 'disk' }] });
  });
});

describe('replay', () => {
  it('replays the histories of the wake-ups above, and the recorded ones, without a determinism error', async () => {
    const histories: { workflowId: string; history: temporal.api.history.v1.IHistory }[] = [];
    for (const { name, handle } of recorded) {
      await handle.terminate('recorded').catch(() => undefined);
      histories.push({ workflowId: name, history: await handle.fetchHistory() });
      await recordHistory(env.client, name, handle.workflowId);
    }
    for (const file of readdirSync(HISTORIES).filter((name) => name.endsWith('.json'))) {
      const history = temporal.api.history.v1.History.fromObject(JSON.parse(readFileSync(join(HISTORIES, file), 'utf8')));
      histories.push({ workflowId: `recorded:${file}`, history });
    }
    expect(histories.filter(({ workflowId }) => workflowId.startsWith('recorded:')).length).toBeGreaterThanOrEqual(5);
    const failures: string[] = [];
    for await (const result of Worker.runReplayHistories({ workflowsPath: WORKFLOWS }, histories)) {
      if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
    }
    expect(failures).toEqual([]);
    expect(prefetchesIn(histories.map(({ history }) => history.events as HistoryEvent[]))).toBeGreaterThanOrEqual(5);
  }, 120_000);
});

/** A protobuf Timestamp or Duration in ms. */
function msOf(time: { seconds?: unknown; nanos?: number | null }): number {
  return Number(time.seconds ?? 0) * 1000 + Math.round((time.nanos ?? 0) / 1e6);
}

/** Activities named `wake` scheduled across the histories. */
function prefetchesIn(histories: HistoryEvent[][]): number {
  return histories.flat().filter((event) => event.activityTaskScheduledEventAttributes?.activityType?.name === 'wake').length;
}
