// The workflow interceptor that gives kvfabric's AI SDK model calls a heartbeat timeout where the workflow
// set none (src/ai-sdk/model-call-timeouts.ts); the AI SDK loop killed mid-call in failover.test.ts shows
// what it is for. And the route it gives the call after a planned wake-up (src/ai-sdk/model-call-route.ts),
// which failover.test.ts runs across two workers.
import { ActivityFailure, RetryState, TimeoutFailure, TimeoutType } from '@temporalio/common';
import type { ActivityInput } from '@temporalio/workflow';
import { describe, expect, it } from 'vitest';

import {
  learnModelCallRoute,
  MODEL_CALL_ROUTE_START_TIMEOUT_MS,
  neverStarted,
  takeModelCallRoute,
} from '../../src/ai-sdk/model-call-route';
import { MODEL_CALL_HEARTBEAT_TIMEOUT_MS, withModelCallHeartbeat } from '../../src/ai-sdk/model-call-timeouts';

const call = (activityType: string, modelId: unknown, options: ActivityInput['options'] = { startToCloseTimeout: '10 minutes' }) =>
  ({ activityType, args: [{ modelId, options: {} }], options, headers: {}, seq: 1 }) as ActivityInput;

describe('kvfabric model calls get a heartbeat timeout', () => {
  it("sets it on @temporalio/ai-sdk's model calls to kvfabric's model ids, keeping the workflow's other options", () => {
    for (const activityType of ['invokeModel', 'invokeModelStreaming']) {
      for (const modelId of ['kvfabric', 'kvfabric:support']) {
        expect(withModelCallHeartbeat(call(activityType, modelId)).options).toEqual({
          startToCloseTimeout: '10 minutes',
          heartbeatTimeout: MODEL_CALL_HEARTBEAT_TIMEOUT_MS,
        });
      }
    }
  });

  it("leaves a workflow's own heartbeat timeout, other models' calls and other activities alone", () => {
    const own = call('invokeModel', 'kvfabric', { startToCloseTimeout: '1 minute', heartbeatTimeout: '30 seconds' });
    const others = [
      own,
      call('invokeModel', 'gpt-4o'),
      call('invokeModel', 'kvfabricx'),
      call('invokeModel', undefined),
      call('search', 'kvfabric'),
    ];
    for (const input of others) expect(withModelCallHeartbeat(input)).toBe(input);
  });
});

describe('the model call after a wake-up goes to the worker that prefetched', () => {
  const answer = (outcome: string, worker = 'kvfabric@gpu-2') => ({ outcome, bytes: 1, ms: 1, contextBytes: 1, worker });

  it('sends the next kvfabric model call, once, to the queue the prefetch answered with, with a start timeout', () => {
    learnModelCallRoute(answer('resumed'));
    const routed = takeModelCallRoute(call('invokeModel', 'kvfabric'));
    expect(routed?.options).toEqual({
      startToCloseTimeout: '10 minutes',
      taskQueue: 'kvfabric@gpu-2',
      scheduleToStartTimeout: MODEL_CALL_ROUTE_START_TIMEOUT_MS,
    });
    expect(takeModelCallRoute(call('invokeModel', 'kvfabric'))).toBeUndefined();
  });

  it('routes nothing after a wake-up that found no KV, or an answer without a worker', () => {
    for (const nothing of [answer('none'), answer('resumed', ''), undefined, { outcome: 'resumed' }]) {
      learnModelCallRoute(nothing);
      expect(takeModelCallRoute(call('invokeModel', 'kvfabric'))).toBeUndefined();
    }
  });

  it('falls back to the call’s own queue only when no worker started the routed call', () => {
    const timedOut = (type: TimeoutType) =>
      new ActivityFailure(
        'activity timed out',
        'invokeModel',
        '1',
        RetryState.NON_RETRYABLE_FAILURE,
        'w',
        new TimeoutFailure(undefined, undefined, type),
      );
    expect(neverStarted(timedOut(TimeoutType.SCHEDULE_TO_START))).toBe(true);
    expect(neverStarted(timedOut(TimeoutType.HEARTBEAT))).toBe(false);
    expect(neverStarted(new Error('model failed'))).toBe(false);
  });
});
