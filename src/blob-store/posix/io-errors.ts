// File-system failures as FabricErrors: a full disk or quota is STORAGE_FULL (the caller can evict or
// grow the volume), anything else UNAVAILABLE with the errno (the tier is unusable, not the data bad).
// Missing files are not handled here: callers that expect a file report them as INTEGRITY themselves.

import { FabricError } from '../../fabric/errors';

export function errnoOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** `what` says what was being done, e.g. "writing segment 3f... of context 'a'". */
export function ioError(err: unknown, what: string): FabricError {
  if (err instanceof FabricError) return err;
  const errno = errnoOf(err);
  if (errno === 'ENOSPC' || errno === 'EDQUOT') {
    return new FabricError('STORAGE_FULL', `${what}: the cold tier's storage is full (${errno}); the write was rolled back`);
  }
  const detail = err instanceof Error ? err.message : String(err);
  return new FabricError('UNAVAILABLE', `${what}: cold-tier storage failed: ${detail}`);
}
