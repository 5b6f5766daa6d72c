// S3 failures as FabricErrors. 412 is the refused condition (PreconditionFailed), 404 an absent key
// (callers that expect one decide), 416 a range past the end; refused credentials are PERMISSION_DENIED;
// a server that is down, slow or failing is UNAVAILABLE (retry later). Messages name the operation, the
// key and S3's error name and status: never a credential (the SDK's errors carry none, and the request's
// headers are not quoted).
import { FabricError } from '../../fabric/errors';
import { PreconditionFailed } from '../blob-errors';

interface S3Failure {
  name?: string;
  code?: string;
  $metadata?: { httpStatusCode?: number; attempts?: number };
}

export function statusOf(err: unknown): number | undefined {
  return (err as S3Failure | null)?.$metadata?.httpStatusCode;
}

/** How many times the SDK sent the request that failed (its own retries included). */
export function attemptsOf(err: unknown): number | undefined {
  return (err as S3Failure | null)?.$metadata?.attempts;
}

/** 409 ConditionalRequestConflict: a conditional write raced another change of the key; retrying decides. */
export function isConditionalConflict(err: unknown): boolean {
  return statusOf(err) === 409 && (err as S3Failure).name === 'ConditionalRequestConflict';
}

export function isNotFound(err: unknown): boolean {
  const name = (err as S3Failure | null)?.name;
  return statusOf(err) === 404 || name === 'NoSuchKey' || name === 'NotFound';
}

/** `what` says what was being done, e.g. "writing blob m/a (s3://b/p)". */
export function s3Error(err: unknown, key: string, what: string): FabricError {
  if (err instanceof FabricError) return err;
  const status = statusOf(err);
  const failure = err as S3Failure | null;
  const name = failure?.name ?? failure?.code ?? 'Error';
  const detail = `${what}: ${name}${status === undefined ? '' : ` (HTTP ${status})`}`;
  if (status === 412) return new PreconditionFailed(key, `${detail}: the condition no longer holds`);
  if (status === 416) return new FabricError('OUT_OF_RANGE', `${detail}: the range lies past the blob's end`);
  if (status === 401 || status === 403) return new FabricError('PERMISSION_DENIED', `${detail}: the store refused these credentials`);
  if (status === 400) return new FabricError('INVALID_ARGUMENT', `${detail}: ${(err as Error).message?.slice(0, 200) ?? ''}`);
  const message = err instanceof Error && status === undefined ? `: ${err.message.slice(0, 200)}` : '';
  return new FabricError('UNAVAILABLE', `${detail}${message}: the object store could not be reached or failed`);
}
