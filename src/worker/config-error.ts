// A setting the worker cannot start with: the operator's to fix, so it names the setting in one line. A
// FabricError (INVALID_ARGUMENT, or the code of the check that refused it: PERMISSION_DENIED for a key
// file others can read) without a stack: however it is printed (`console.error(err)` in the README's
// worker, an uncaught rejection, kvfabric-worker's own message), it is that one line, not a trace into
// kvfabric's code that would only bury it.
import { FabricError, type ErrorCode } from '../fabric/errors';

export class WorkerConfigError extends FabricError {
  constructor(message: string, code: ErrorCode = 'INVALID_ARGUMENT') {
    super(code, message);
    this.name = 'WorkerConfigError';
    // util.inspect prints the stack and every enumerable own property: one line, and `code` still readable.
    this.stack = `${this.name}: ${message}`;
    Object.defineProperty(this, 'code', { enumerable: false });
  }
}

/** Whatever reading the settings threw, as a WorkerConfigError (that reader reads nothing but settings and the files they name). */
export function asWorkerConfigError(err: unknown): WorkerConfigError {
  if (err instanceof WorkerConfigError) return err;
  if (err instanceof FabricError) return new WorkerConfigError(err.message, err.code);
  return new WorkerConfigError(err instanceof Error ? err.message : String(err));
}
