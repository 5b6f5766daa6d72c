// Workflow code: where a run's next kvfabric model call goes after a planned wake-up's prefetch
// (docs/ai-sdk.md#planned-wake-ups). A model call runs on whichever worker polls its queue first
// (@temporalio/ai-sdk's invokeModel on a shared queue), so KV a prefetch brought into one worker's engine
// would help only a call that happened to land there. The prefetch (the activity kvfabricWakeModelMemory of
// kvfabric/workflows/model-memory) answers with its worker's own queue (`${taskQueue}@${workerId}`, which
// that worker alone polls, and where the plugin serves the model calls too); the interceptor that sees
// the answer (model-call-timeouts.ts) sends the run's next kvfabric model call there, once. A worker that
// does not start it within MODEL_CALL_ROUTE_START_TIMEOUT_MS (gone) costs that wait, and the call goes to
// its own queue as any call does. Module state is the run's own (the SDK isolates each workflow's
// modules), set only from an activity's result in the history, so a replay routes alike.
import { TimeoutFailure, TimeoutType } from '@temporalio/common';
import { ActivityFailure, type ActivityInput } from '@temporalio/workflow';

/** The prefetch's activity (ModelMemoryActivities in src/workflows/model-memory.ts; the plugin checks the two agree). */
export const MODEL_MEMORY_WAKE_ACTIVITY = 'kvfabricWakeModelMemory';

/** A live worker starts a call at once (its own queue takes every call, holder-calls.ts): longer is a worker gone. */
export const MODEL_CALL_ROUTE_START_TIMEOUT_MS = 5000;

let nextCallQueue: string | undefined;

/** Learns the route from a prefetch's answer: its worker, unless the run had no KV to bring back. */
export function learnModelCallRoute<T>(answer: T): T {
  const { outcome, worker } = (answer ?? {}) as { outcome?: unknown; worker?: unknown };
  nextCallQueue = outcome !== 'none' && typeof worker === 'string' && worker !== '' ? worker : undefined;
  return answer;
}

/** The call sent where the route says, the route forgotten once taken; undefined when there is none. */
export function takeModelCallRoute(input: ActivityInput): ActivityInput | undefined {
  const queue = nextCallQueue;
  nextCallQueue = undefined;
  if (queue === undefined) return undefined;
  return { ...input, options: { ...input.options, taskQueue: queue, scheduleToStartTimeout: MODEL_CALL_ROUTE_START_TIMEOUT_MS } };
}

/** Whether a routed call failed only because no worker started it (so it may go to its own queue instead). */
export function neverStarted(err: unknown): boolean {
  return err instanceof ActivityFailure && err.cause instanceof TimeoutFailure && err.cause.timeoutType === TimeoutType.SCHEDULE_TO_START;
}
