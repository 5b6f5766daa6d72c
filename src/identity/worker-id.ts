// A worker's id names its audit file (`<tier-dir>/audit/denials-<id>.jsonl`), its own task queue
// (`<queue>@<id>`) and its log lines, so it is held to a conservative alphabet wherever it is set: no
// separator, no dot first (no `..`), no control character. Pure, like agent-identity.ts.
import { FabricError } from '../fabric/errors';
import { quotedId } from './printable-id';

const WORKER_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const WORKER_ID_RULE = "1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit";

export function isWorkerId(value: unknown): value is string {
  return typeof value === 'string' && WORKER_ID.test(value);
}

/** INVALID_ARGUMENT naming `setting` (the flag, variable or option that gave it) unless `value` is a worker id. */
export function checkWorkerId(value: unknown, setting: string): asserts value is string {
  if (!isWorkerId(value))
    throw new FabricError('INVALID_ARGUMENT', `${setting}: the worker id ${quotedId(String(value))} must be ${WORKER_ID_RULE}`);
}
