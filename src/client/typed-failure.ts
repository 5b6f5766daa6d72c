// The FabricError a workflow's failure carries: the agent workflow fails (and its updates fail) only
// with ApplicationFailures whose type is a FabricError code, often wrapped (an ActivityFailure around
// the worker's refusal). This finds the typed one in the chain.
import { ApplicationFailure } from '@temporalio/common';

import { ERROR_CODES, type ErrorCode } from '../fabric/errors';

/** The first ApplicationFailure in `err`'s chain of causes whose type is a FabricError code (at most 8 deep). */
export function typedCause(err: unknown): (ApplicationFailure & { type: ErrorCode }) | undefined {
  for (let current = err, depth = 0; current && depth < 8; current = (current as { cause?: unknown }).cause, depth++) {
    if (current instanceof ApplicationFailure && (ERROR_CODES as readonly string[]).includes(current.type ?? ''))
      return current as ApplicationFailure & { type: ErrorCode };
  }
  return undefined;
}
