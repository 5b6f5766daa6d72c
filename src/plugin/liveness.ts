// The worker side of failover's timing: how soon the server notices that a kvfabric worker is gone. The
// agent side (holderLossMs, heartbeatMs) is in src/workflows/definitions.ts; the phases they add up to,
// measured, are in docs/agents.md#failover-timing. The plugin applies these to the workers it serves
// unless the user's WorkerOptions set them.
import type { WorkerOptions } from '@temporalio/worker';

/**
 * A workflow task waits this long on the sticky queue of the worker that ran the workflow last before any
 * worker may take it (the SDK's default: 10 s). When that worker was killed, every call on the agent
 * waits this long first. A live worker takes its sticky tasks within milliseconds (it keeps polls open
 * while it has a free workflow slot), and one that misses this is only replayed elsewhere, not failed over.
 */
export const STICKY_QUEUE_TIMEOUT_MS = 2000;

/**
 * The most time between two heartbeats the server hears from a running call (the SDK: 80% of the
 * heartbeat timeout, so a 10 s timeout would leave 2 s for a late one). Activities heartbeat every second;
 * with this the server hears one at least every 2 s, so a call misses its heartbeat timeout (default
 * 10 s) only after four heartbeats in a row went missing: a stalled or dead process, not a busy one.
 */
export const HEARTBEAT_THROTTLE_MS = 2000;

/** The user's worker options with kvfabric's liveness settings wherever the user set none. */
export function withLivenessDefaults(options: WorkerOptions): WorkerOptions {
  return {
    ...options,
    stickyQueueScheduleToStartTimeout: options.stickyQueueScheduleToStartTimeout ?? STICKY_QUEUE_TIMEOUT_MS,
    maxHeartbeatThrottleInterval: options.maxHeartbeatThrottleInterval ?? HEARTBEAT_THROTTLE_MS,
  };
}
