// Workflow code: an interceptor the kvfabric plugin adds to the workflows a worker bundles from a
// workflowsPath. @temporalio/ai-sdk runs each model call as an activity with the options the workflow gave
// `temporalProvider.languageModel(id, options)`: by default a 10-minute start-to-close and no heartbeat
// timeout, so a call whose worker dies is retried only 10 minutes later. For kvfabric's model ids this sets
// a heartbeat timeout where the workflow set none: kvfabric's provider heartbeats every second while a call
// runs (the plugin has the server hear one at least every 2 s), so a call silent this long lost its worker,
// and Temporal runs it again on another, which continues the run's KV from the cold tier (docs/ai-sdk.md).
// The same interceptor reads a planned wake-up's prefetch's answer and sends the run's next model call to
// the worker that prefetched (model-call-route.ts).
import type { ActivityInput, Next, WorkflowInterceptorsFactory, WorkflowOutboundCallsInterceptor } from '@temporalio/workflow';

import { isKvFabricModelId } from './model-id';
import { learnModelCallRoute, MODEL_MEMORY_WAKE_ACTIVITY, neverStarted, takeModelCallRoute } from './model-call-route';

/** Two heartbeats the server did not hear, and then some: a dead or frozen worker, not a slow model. */
export const MODEL_CALL_HEARTBEAT_TIMEOUT_MS = 5000;

/** @temporalio/ai-sdk's model-call activities. */
export const MODEL_CALL_ACTIVITIES: ReadonlySet<string> = new Set(['invokeModel', 'invokeModelStreaming']);

/** Whether the activity is a model call to one of kvfabric's model ids. */
function isKvFabricModelCall(input: ActivityInput): boolean {
  if (!MODEL_CALL_ACTIVITIES.has(input.activityType)) return false;
  const modelId = (input.args[0] as { modelId?: unknown } | undefined)?.modelId;
  return typeof modelId === 'string' && isKvFabricModelId(modelId);
}

/** The activity's input with the heartbeat timeout set, when it is a kvfabric model call with none. */
export function withModelCallHeartbeat(input: ActivityInput): ActivityInput {
  if (!isKvFabricModelCall(input) || input.options.heartbeatTimeout !== undefined) return input;
  return { ...input, options: { ...input.options, heartbeatTimeout: MODEL_CALL_HEARTBEAT_TIMEOUT_MS } };
}

class ModelCallTimeouts implements WorkflowOutboundCallsInterceptor {
  async scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>) {
    if (input.activityType === MODEL_MEMORY_WAKE_ACTIVITY) return learnModelCallRoute(await next(input));
    const call = withModelCallHeartbeat(input);
    const routed = isKvFabricModelCall(call) ? takeModelCallRoute(call) : undefined;
    if (!routed) return next(call);
    try {
      return await next(routed);
    } catch (err) {
      if (!neverStarted(err)) throw err;
      return next(call); // the prefetching worker is gone: any worker continues the KV from the cold tier
    }
  }
}

export const interceptors: WorkflowInterceptorsFactory = () => ({ outbound: [new ModelCallTimeouts()] });
