// The refusal of a conditional write: the key already exists (create-only) or is no longer at the
// version the writer read (replace-only-this-version). A FabricError with STALE_HANDLE, the code a
// fenced-off holder already gets (the native and TypeScript code lists stay as they are), and a class of
// its own so a caller that races on purpose (a create-once record, a manifest under If-Match) can tell
// "someone else won" from any other stale state.
import { FabricError } from '../fabric/errors';

export class PreconditionFailed extends FabricError {
  constructor(
    /** The key whose condition failed. */
    readonly key: string,
    message: string,
  ) {
    super('STALE_HANDLE', message);
    this.name = 'PreconditionFailed';
  }
}

export function isPreconditionFailed(err: unknown): err is PreconditionFailed {
  return err instanceof PreconditionFailed;
}
