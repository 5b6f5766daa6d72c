// An AI SDK agent whose worker dies mid-loop: worker processes running @temporalio/ai-sdk with kvfabric's
// model provider and the real model (fixtures/ai-sdk-worker.ts), on a real dev server. Worker A runs a
// research loop's first model calls and is killed with SIGKILL; worker B, started after, runs the rest.
// B's first call adopts the run's KV from the shared cold tier (A's durable copy, written after each call)
// instead of evaluating the conversation again, and the loop calls the same tools and says the same
// words as a loop that was never interrupted (greedy decoding).
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';

import type { WorkflowHandle } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { eventually, startCluster, type TestCluster } from '../temporal/harness';
import type { LoopStep, ResearchRequest, researchAgent } from './research-workflows';

const AI_SDK_WORKER = join(__dirname, 'fixtures', 'ai-sdk-worker.ts');
const LLAMA_WORKER = [
  ...['--engine', 'llama', '--model', 'smollm2-135m', '--context-length', '2048'],
  ...['--device-blocks', '1024', '--host-blocks', '1024'],
];
const STEPS = 4;
const QUESTION = 'What does kvfabric keep for AI agents?';
/** Model calls completed on A before it is killed. */
const CALLS_BEFORE_KILL = 2;

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

describe('an AI SDK agent on kvfabric across a SIGKILL of its worker', () => {
  it('continues on another worker process from the cold tier, and replies as an uninterrupted loop', { timeout: 300_000 }, async () => {
    const doomed = await cluster.spawnWorker({ workerId: 'ai-sdk-a', args: LLAMA_WORKER, entry: AI_SDK_WORKER });
    expect(doomed.output()).toContain('kvfabric GPU worker ready');
    const uninterrupted = await (await startResearch()).result();

    // Lost with its worker, a call runs again after this timeout (A may have taken the 3rd call already).
    const interrupted = await startResearch({ callTimeout: '30 seconds' });
    await eventually(
      async () => ((await completedModelCalls(interrupted)).length >= CALLS_BEFORE_KILL ? true : undefined),
      120_000,
      `${CALLS_BEFORE_KILL} model calls on worker A`,
    );
    doomed.child.kill('SIGKILL');
    expect(await doomed.exited).toBe('SIGKILL');
    const survivor = await cluster.spawnWorker({ workerId: 'ai-sdk-b', args: LLAMA_WORKER, entry: AI_SDK_WORKER });
    const steps = await interrupted.result();

    const calls = await completedModelCalls(interrupted);
    const firstOnB = calls.findIndex((call) => call.worker === 'ai-sdk-b');
    console.log(
      '[ai-sdk failover] reused/evaluated tokens per step, uninterrupted:',
      figures(uninterrupted),
      '; across the SIGKILL:',
      figures(steps),
      `; workers: ${calls.map((call) => `${call.worker}#${call.attempt}`).join(', ')}`,
    );
    expect(calls).toHaveLength(STEPS);
    // A ran at least the calls before the kill, B the rest: the kill was real and the loop went on.
    expect(firstOnB).toBeGreaterThanOrEqual(CALLS_BEFORE_KILL);
    expect(calls.slice(0, firstOnB).every((call) => call.worker === 'ai-sdk-a')).toBe(true);
    expect(calls.slice(firstOnB).every((call) => call.worker === 'ai-sdk-b')).toBe(true);
    expect(survivor.output()).toContain('kvfabric GPU worker ready');

    // The same tool calls and words as the uninterrupted loop: the adopted KV is the KV A computed.
    expect(steps.map((step) => [step.toolCalls, step.text])).toEqual(uninterrupted.map((step) => [step.toolCalls, step.text]));
    expect(steps.map((step) => step.toolCalls.map((call) => call.toolName))).toEqual([['search'], ['read'], ['search'], []]);
    // B's first call continued the KV A left in the cold tier instead of evaluating the conversation again:
    // at least the first step's (its durable copy was written before the second call began on A).
    const adopted = steps[firstOnB]!;
    expect(adopted.reusedTokens).toBeGreaterThan(0);
    expect(adopted.reusedTokens).toBeGreaterThanOrEqual(steps[0]!.inputTokens! + steps[0]!.outputTokens!);
    expect(adopted.reusedTokens! + adopted.evaluatedTokens!).toBe(adopted.inputTokens);
  });
});
