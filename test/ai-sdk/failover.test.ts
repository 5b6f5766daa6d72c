// An AI SDK agent whose worker dies mid-call: worker processes running @temporalio/ai-sdk with kvfabric's
// model provider and the real model (fixtures/ai-sdk-worker.ts), on a real dev server, with the defaults
// (no timeout set by hand: the plugin gives kvfabric's model calls their heartbeat timeout,
// src/ai-sdk/model-call-timeouts.ts). Workers A and B both serve the queue; the worker running the loop's
// third model call is killed with SIGKILL in the middle of it, and the other runs the rest. Its first call
// continues the run's KV (its own copy, or the durable copy in the shared cold tier, written after each
// call) instead of evaluating the conversation again, the loop calls the same tools and says the same words as a loop that
// was never interrupted (greedy decoding), and it ends within 15 s of the kill (issue 39).
// A planned wake-up across two workers (sleepThenWakeModelMemory, issue 43): the next call is sent to the
// worker that prefetched, whichever held the KV before, and finds it hot there; when that worker is killed
// before the call, the call goes to the shared queue once no worker has started it for 5 s, and replies
// the same from the cold tier.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';

import type { WorkflowHandle } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { MODEL_CALL_ROUTE_START_TIMEOUT_MS } from '../../src/ai-sdk/model-call-route';
import { MODEL_CALL_HEARTBEAT_TIMEOUT_MS } from '../../src/ai-sdk/model-call-timeouts';
import { MODEL_MEMORY_UNMEASURED_LEAD_MS } from '../../src/workflows/model-memory';
import { eventually, startCluster, type TestCluster } from '../temporal/harness';
import type { LoopStep, PausedConversation, ResearchRequest, pausedAgent, researchAgent } from './research-workflows';

const PendingActivityState = temporal.api.enums.v1.PendingActivityState;
const AI_SDK_WORKER = join(__dirname, 'fixtures', 'ai-sdk-worker.ts');
const LLAMA_WORKER = [
  ...['--engine', 'llama', '--model', 'smollm2-135m', '--context-length', '2048'],
  ...['--device-blocks', '1024', '--host-blocks', '1024'],
];
const STEPS = 4;
const QUESTION = 'What does kvfabric keep for AI agents?';
/** Model calls completed before the worker running the next one is killed. */
const CALLS_BEFORE_KILL = 2;
/** Issue 39's bound, from the kill to the loop's end. */
const FAILOVER_BOUND_MS = 15_000;

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster();
});
afterAll(async () => cluster?.close());

function startResearch(
  request: Omit<ResearchRequest, 'modelId' | 'question' | 'steps'> = {},
): Promise<WorkflowHandle<typeof researchAgent>> {
  return cluster.client.workflow.start<typeof researchAgent>('researchAgent', {
    taskQueue: cluster.taskQueue,
    workflowId: `research-${randomBytes(4).toString('hex')}`,
    args: [{ modelId: 'kvfabric', question: QUESTION, steps: STEPS, ...request }],
    workflowExecutionTimeout: '10 minutes',
  });
}

/** The run's completed invokeModel calls in order, each with the worker (its identity) that completed it. */
async function completedModelCalls(handle: WorkflowHandle): Promise<Array<{ worker: string; attempt: number }>> {
  const events = (await handle.fetchHistory()).events ?? [];
  const scheduled = new Set<string>();
  const attempts = new Map<string, number>();
  const calls: Array<{ worker: string; attempt: number }> = [];
  for (const event of events) {
    const id = String(event.eventId);
    if (event.activityTaskScheduledEventAttributes?.activityType?.name === 'invokeModel') scheduled.add(id);
    const started = event.activityTaskStartedEventAttributes;
    if (started) attempts.set(String(started.scheduledEventId), started.attempt ?? 1);
    const completed = event.activityTaskCompletedEventAttributes;
    if (completed && scheduled.has(String(completed.scheduledEventId))) {
      calls.push({ worker: completed.identity ?? '', attempt: attempts.get(String(completed.scheduledEventId)) ?? 1 });
    }
  }
  return calls;
}

function figures(steps: LoopStep[]): string {
  return steps.map((step) => `${step.reusedTokens}/${step.evaluatedTokens}`).join(', ');
}

/** The worker running the run's model call now, once one has started (a call not yet taken has no worker). */
async function modelCallRunningOn(handle: WorkflowHandle): Promise<string | undefined> {
  const { raw } = await handle.describe();
  const running = (raw.pendingActivities ?? []).find(
    (pending) => pending.activityType?.name === 'invokeModel' && pending.state === PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
  );
  return running?.lastWorkerIdentity || undefined;
}

describe('an AI SDK agent on kvfabric across a SIGKILL of its worker', () => {
  it('continues on another worker process from the cold tier within 15 s, and replies as an uninterrupted loop', {
    timeout: 300_000,
  }, async () => {
    const a = await cluster.spawnWorker({ workerId: 'ai-sdk-a', args: LLAMA_WORKER, entry: AI_SDK_WORKER });
    expect(a.output()).toContain('kvfabric GPU worker ready');
    const uninterrupted = await (await startResearch()).result();
    const b = await cluster.spawnWorker({ workerId: 'ai-sdk-b', args: LLAMA_WORKER, entry: AI_SDK_WORKER });
    expect(b.output()).toContain('kvfabric GPU worker ready');

    const interrupted = await startResearch(); // the defaults: no timeout of the model calls set here
    const doomedId = await eventually(
      async () =>
        (await completedModelCalls(interrupted)).length >= CALLS_BEFORE_KILL ? await modelCallRunningOn(interrupted) : undefined,
      120_000,
      `${CALLS_BEFORE_KILL} model calls done and the next one running`,
    );
    const [doomed, survivor] = doomedId === 'ai-sdk-a' ? [a, b] : [b, a];
    const survivorId = doomedId === 'ai-sdk-a' ? 'ai-sdk-b' : 'ai-sdk-a';
    doomed.child.kill('SIGKILL');
    const killedAt = Date.now();
    const steps = await interrupted.result();
    const killToEndMs = Date.now() - killedAt;
    expect(await doomed.exited).toBe('SIGKILL');

    const calls = await completedModelCalls(interrupted);
    const killed = calls.findIndex((call) => call.attempt > 1);
    console.log(
      '[ai-sdk failover] reused/evaluated tokens per step, uninterrupted:',
      figures(uninterrupted),
      '; across the SIGKILL:',
      figures(steps),
      `; workers: ${calls.map((call) => `${call.worker}#${call.attempt}`).join(', ')}`,
      `; kill -> loop ended: ${killToEndMs} ms (model-call heartbeat timeout ${MODEL_CALL_HEARTBEAT_TIMEOUT_MS} ms)`,
    );
    expect(calls).toHaveLength(STEPS);
    // The call the kill interrupted ran again, on the survivor, as did every call after it.
    expect(killed).toBeGreaterThanOrEqual(CALLS_BEFORE_KILL);
    expect(calls.slice(killed).every((call) => call.worker === survivorId)).toBe(true);
    expect(survivor.output()).toContain('kvfabric GPU worker ready');
    expect(killToEndMs).toBeLessThanOrEqual(FAILOVER_BOUND_MS);
    // What decided: the heartbeat timeout the plugin gave every model call (the workflow set none).
    const modelCalls = ((await interrupted.fetchHistory()).events ?? []).flatMap((event) => {
      const scheduled = event.activityTaskScheduledEventAttributes;
      return scheduled?.activityType?.name === 'invokeModel' ? [scheduled] : [];
    });
    expect(modelCalls.map((call) => Number(call.heartbeatTimeout?.seconds))).toEqual(
      Array(STEPS).fill(MODEL_CALL_HEARTBEAT_TIMEOUT_MS / 1000),
    );

    // The same tool calls and words as the uninterrupted loop: the adopted KV is the KV computed before.
    expect(steps.map((step) => [step.toolCalls, step.text])).toEqual(uninterrupted.map((step) => [step.toolCalls, step.text]));
    expect(steps.map((step) => step.toolCalls.map((call) => call.toolName))).toEqual([['search'], ['read'], ['search'], []]);
    // The survivor's call continued the run's KV instead of evaluating the conversation again: at least the
    // first step's (its durable copy was written before the second call began).
    const adopted = steps[killed]!;
    expect(adopted.reusedTokens).toBeGreaterThan(0);
    expect(adopted.reusedTokens).toBeGreaterThanOrEqual(steps[0]!.inputTokens! + steps[0]!.outputTokens!);
    expect(adopted.reusedTokens! + adopted.evaluatedTokens!).toBe(adopted.inputTokens);
  });
});

/** The run's model calls and its wake-up's prefetch, in order: the queue each was scheduled on and its outcome. */
async function scheduledCalls(handle: WorkflowHandle): Promise<Array<{ activity: string; queue: string; outcome: string }>> {
  const events = (await handle.fetchHistory()).events ?? [];
  const calls = new Map<string, { activity: string; queue: string; outcome: string }>();
  for (const event of events) {
    const scheduled = event.activityTaskScheduledEventAttributes;
    if (scheduled) {
      const activity = scheduled.activityType?.name ?? '';
      calls.set(String(event.eventId), { activity, queue: scheduled.taskQueue?.name ?? '', outcome: 'scheduled' });
    }
    const ended = [
      ['completed', event.activityTaskCompletedEventAttributes],
      ['timed out', event.activityTaskTimedOutEventAttributes],
      ['failed', event.activityTaskFailedEventAttributes],
    ] as const;
    for (const [outcome, attributes] of ended) {
      const call = attributes ? calls.get(String(attributes.scheduledEventId)) : undefined;
      if (call) call.outcome = outcome;
    }
  }
  return [...calls.values()];
}

describe('a planned wake-up of an AI SDK run on two workers', () => {
  const WAKE_QUEUE = `wake-${randomBytes(4).toString('hex')}`;
  /** The KV leaves a worker's engine 1.5 s after a call, its host memory 1 s later. */
  const IDLE = { KVFABRIC_TEST_MODEL_CALL_IDLE_MS: '1500,1000' };
  const PAUSE_MS = MODEL_MEMORY_UNMEASURED_LEAD_MS + 8000;
  const workers: Array<Awaited<ReturnType<TestCluster['spawnWorker']>>> = [];
  /** The follow-up's reply where the wake-up's KV was found hot. */
  let hotReply: string;

  beforeAll(async () => {
    for (const workerId of ['wake-c', 'wake-d']) {
      workers.push(await cluster.spawnWorker({ workerId, taskQueue: WAKE_QUEUE, args: LLAMA_WORKER, entry: AI_SDK_WORKER, env: IDLE }));
    }
  }, 120_000);

  const start = (wake: boolean) =>
    cluster.client.workflow.start<typeof pausedAgent>('pausedAgent', {
      taskQueue: WAKE_QUEUE,
      workflowId: `paused-${randomBytes(4).toString('hex')}`,
      args: ['kvfabric', QUESTION, PAUSE_MS, wake],
      workflowExecutionTimeout: '5 minutes',
    });

  it('sends the next call to the worker that prefetched, which continues the KV hot', { timeout: 180_000 }, async () => {
    // Two rounds of two runs at once: each prefetch lands on either worker, whichever held the run's first
    // call. Two at a time, as a llama engine keeps two contexts hot (its sequences): a third prefetched
    // into one engine would take the place of the least recently used, as a third call would.
    const handles: Array<WorkflowHandle<typeof pausedAgent>> = [];
    const runs: PausedConversation[] = [];
    for (const round of [1, 2]) {
      const started = await Promise.all([round, round].map(() => start(true)));
      runs.push(...(await Promise.all(started.map((handle) => handle.result()))));
      handles.push(...started);
    }
    const holders = workers.map((worker) => worker.holder);
    for (const [i, run] of runs.entries()) {
      expect(holders).toContain(run.woke?.worker);
      expect(run.steps[1]!.resumedFrom).toBe('hot');
      expect(await scheduledCalls(handles[i]!)).toEqual([
        { activity: 'invokeModel', queue: WAKE_QUEUE, outcome: 'completed' },
        { activity: 'kvfabricWakeModelMemory', queue: WAKE_QUEUE, outcome: 'completed' },
        { activity: 'invokeModel', queue: run.woke!.worker, outcome: 'completed' },
      ]);
    }
    console.log('[ai-sdk wake] prefetches:', runs.map((run) => `${run.woke!.worker.split('@')[1]} ${run.woke!.outcome}`).join(', '));
    expect(new Set(runs.map((run) => run.steps[1]!.text)).size).toBe(1);
    hotReply = runs[0]!.steps[1]!.text;
  });

  it('sends the call to the shared queue when the prefetching worker is gone, and replies the same', { timeout: 180_000 }, async () => {
    const handle = await start(true);
    // The worker that completed the prefetch (the shared queue's workers are named by their worker id).
    const prefetcher = await eventually(
      async () => {
        const events = (await handle.fetchHistory()).events ?? [];
        const wake = events.find((event) => event.activityTaskScheduledEventAttributes?.activityType?.name === 'kvfabricWakeModelMemory');
        const completed = events.find(
          (event) => String(event.activityTaskCompletedEventAttributes?.scheduledEventId) === String(wake?.eventId),
        );
        return completed?.activityTaskCompletedEventAttributes?.identity ?? undefined;
      },
      60_000,
      'the prefetch to complete',
    );
    const doomed = workers.find((worker) => worker.holder.endsWith(`@${prefetcher}`))!;
    doomed.child.kill('SIGKILL');
    const killedAt = Date.now();
    const run = await handle.result();
    expect(await doomed.exited).toBe('SIGKILL');

    expect(run.woke?.worker).toBe(doomed.holder);
    expect(await scheduledCalls(handle)).toEqual([
      { activity: 'invokeModel', queue: WAKE_QUEUE, outcome: 'completed' },
      { activity: 'kvfabricWakeModelMemory', queue: WAKE_QUEUE, outcome: 'completed' },
      { activity: 'invokeModel', queue: doomed.holder, outcome: 'timed out' },
      { activity: 'invokeModel', queue: WAKE_QUEUE, outcome: 'completed' },
    ]);
    // The survivor continued the KV from the cold tier, and replied as the runs that found it hot.
    expect(run.steps[1]!.resumedFrom).toBe('stored');
    expect(run.steps[1]!.reusedTokens).toBeGreaterThanOrEqual(run.steps[0]!.inputTokens! + run.steps[0]!.outputTokens!);
    expect(run.steps[1]!.text).toBe(hotReply);
    console.log(`[ai-sdk wake] prefetching worker killed: the call answered ${Date.now() - killedAt} ms after the kill`);
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(MODEL_CALL_ROUTE_START_TIMEOUT_MS);
  });
});
