// How allocator and tier errors cross into Temporal: every FabricError becomes an ApplicationFailure whose
// type is the stable code, so workflows switch on `type`. Errors a retry cannot fix (a wrong capability,
// corrupt bytes, a bad argument, a context this worker does not hold, a tenant over its quota) are
// non-retryable; running out of a shared resource (blocks, memory, disk) or a busy context is retried with backoff.
import { ApplicationFailure } from '@temporalio/common';

import { isFabricError, type ErrorCode } from '../fabric/errors';

export const NON_RETRYABLE_CODES: readonly ErrorCode[] = [
  'INVALID_ARGUMENT',
  'OUT_OF_RANGE',
  'STALE_HANDLE',
  'INVALID_STATE',
  'PERMISSION_DENIED',
  'INTEGRITY',
  'INCOMPATIBLE',
  // A tenant over its quota is over it until it frees blocks itself: a retry would only be refused again.
  'RESOURCE_EXHAUSTED',
];

export function toApplicationFailure(err: unknown): unknown {
  if (!isFabricError(err)) return err;
  return ApplicationFailure.create({
    type: err.code,
    message: err.message,
    nonRetryable: NON_RETRYABLE_CODES.includes(err.code),
  });
}

/** Runs an activity body, translating FabricErrors on the way out. */
export async function withFailureCodes<T>(body: () => Promise<T>): Promise<T> {
  try {
    return await body();
  } catch (err) {
    throw toApplicationFailure(err);
  }
}
