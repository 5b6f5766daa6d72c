// The workflow interceptor that gives kvfabric's AI SDK model calls a heartbeat timeout where the workflow
// set none (src/ai-sdk/model-call-timeouts.ts); the AI SDK loop killed mid-call in failover.test.ts shows
// what it is for.
import type { ActivityInput } from '@temporalio/workflow';
import { describe, expect, it } from 'vitest';

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
