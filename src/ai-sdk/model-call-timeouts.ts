// Workflow code: an interceptor the kvfabric plugin adds to the workflows a worker bundles from a
// workflowsPath. @temporalio/ai-sdk runs each model call as an activity with the options the workflow gave
// `temporalProvider.languageModel(id, options)`: by default a 10-minute start-to-close and no heartbeat
// timeout, so a call whose worker dies is retried only 10 minutes later. For kvfabric's model ids this sets
// a heartbeat timeout where the workflow set none: kvfabric's provider heartbeats every second while a call
// runs (the plugin has the server hear one at least every 2 s), so a call silent this long lost its worker,
// and Temporal runs it again on another, which continues the run's KV from the cold tier (docs/ai-sdk.md).
import type { ActivityInput, Next, WorkflowInterceptorsFactory, WorkflowOutboundCallsInterceptor } from '@temporalio/workflow';

import { isKvFabricModelId } from './model-id';

/** Two heartbeats the server did not hear, and then some: a dead or frozen worker, not a slow model. */
export const MODEL_CALL_HEARTBEAT_TIMEOUT_MS = 5000;

/** @temporalio/ai-sdk's model-call activities. */
const MODEL_CALL_ACTIVITIES: ReadonlySet<string> = new Set(['invokeModel', 'invokeModelStreaming']);

/** The activity's input with the heartbeat timeout set, when it is a kvfabric model call with none. */
export function withModelCallHeartbeat(input: ActivityInput): ActivityInput {
  if (!MODEL_CALL_ACTIVITIES.has(input.activityType) || input.options.heartbeatTimeout !== undefined) return input;
  const modelId = (input.args[0] as { modelId?: unknown } | undefined)?.modelId;
  if (typeof modelId !== 'string' || !isKvFabricModelId(modelId)) return input;
  return { ...input, options: { ...input.options, heartbeatTimeout: MODEL_CALL_HEARTBEAT_TIMEOUT_MS } };
}

class ModelCallTimeouts implements WorkflowOutboundCallsInterceptor {
  scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>) {
    return next(withModelCallHeartbeat(input));
  }
}

export const interceptors: WorkflowInterceptorsFactory = () => ({ outbound: [new ModelCallTimeouts()] });
