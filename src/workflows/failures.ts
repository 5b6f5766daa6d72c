// How the agent workflow reads the failures of its activities: which mean the holder is gone (fail over),
// which another attempt may not have (retry), and what a caller's update fails with. Updates fail only
// with typed, non-retryable ApplicationFailures whose type is a FabricError code.
import { ActivityFailure, ApplicationFailure, TimeoutFailure } from '@temporalio/workflow';

import { LifecycleError } from './lifecycle';

/** An update's refusal before anything is written to history (validators) or its typed failure. */
export function refusal(type: string, message: string): ApplicationFailure {
  return ApplicationFailure.create({ type, message, nonRetryable: true });
}

/**
 * What a caller's update fails with: a lifecycle refusal is INVALID_STATE; an activity's typed failure
 * keeps its code; an activity nobody completed in time is UNAVAILABLE. `denied` counts capability refusals.
 */
export function asUpdateFailure(err: unknown, denied: () => void): unknown {
  if (err instanceof LifecycleError) return refusal('INVALID_STATE', err.message);
  if (!(err instanceof ActivityFailure)) return err;
  const cause = err.cause;
  if (cause instanceof ApplicationFailure) {
    if (cause.type === 'PERMISSION_DENIED') denied();
    return refusal(cause.type ?? 'UNAVAILABLE', cause.message);
  }
  if (cause instanceof TimeoutFailure)
    return refusal('UNAVAILABLE', `no worker completed ${err.activityType} in time (${cause.timeoutType})`);
  return err;
}

/** Worker loss: the call sat unserved on the holder's queue, its heartbeats stopped, or the holder no longer has the context. */
export function holderLost(err: unknown): boolean {
  if (!(err instanceof ActivityFailure)) return false;
  const cause = err.cause;
  if (cause instanceof TimeoutFailure) return cause.timeoutType === 'SCHEDULE_TO_START' || cause.timeoutType === 'HEARTBEAT';
  return cause instanceof ApplicationFailure && cause.type === 'STALE_HANDLE';
}

/** A failure another attempt on the same holder may not have: what Temporal's own retry policy would retry. */
export function retryable(err: unknown): boolean {
  if (!(err instanceof ActivityFailure)) return false;
  const cause = err.cause;
  if (cause instanceof TimeoutFailure) return cause.timeoutType === 'START_TO_CLOSE';
  return cause instanceof ApplicationFailure && !cause.nonRetryable;
}

/** The failover's recover found no durable copy it could adopt (missing, damaged or stale). */
export function adoptionImpossible(err: unknown): boolean {
  return err instanceof ActivityFailure && err.activityType === 'recover' && failedWith(err, 'INTEGRITY');
}

export function failedWith(err: unknown, code: string): boolean {
  return err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === code;
}

/**
 * A local activity's failure that is the answer itself (a denial, damaged bytes), as the holder's queue
 * would give it; undefined for one the holder's queue should retry. The SDK hands a local activity's
 * failure over as its cause itself, not always wrapped in an ActivityFailure.
 */
export function decisiveLocalFailure(err: unknown): ApplicationFailure | undefined {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure && (cause.type === 'PERMISSION_DENIED' || cause.type === 'INTEGRITY'))
    return refusal(cause.type, cause.message);
  return undefined;
}
