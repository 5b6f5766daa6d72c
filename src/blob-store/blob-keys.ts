// Which keys and prefixes a blob store takes. One alphabet for every backend, so a key is a safe file
// path (no `..`, no absolute path, no name of the POSIX backend's own temp and claim files, which start
// with a dot) and a plain S3 key that needs no escaping. Anything else is INVALID_ARGUMENT.
import { FabricError } from '../fabric/errors';
import type { BlobCondition, ByteRange } from './blob-store';

/** S3's limit on a key; file names stay well under NAME_MAX with segments of at most 200. */
export const MAX_KEY_LENGTH = 1024;
const SEGMENT = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$/;

function describe(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value.slice(0, 80)) : typeof value;
}

/** `key`, checked: INVALID_ARGUMENT unless it is `/`-separated segments of the alphabet above. */
export function checkKey(key: unknown): string {
  if (typeof key !== 'string' || !isKey(key)) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `a blob key is 1-${MAX_KEY_LENGTH} characters of /-separated segments of [A-Za-z0-9._-] not starting with a dot, ` +
        `got ${describe(key)}`,
    );
  }
  return key;
}

/** Whether `key` is one checkKey takes: names others put beside a store's blobs are not its blobs. */
export function isKey(key: string): boolean {
  return key.length <= MAX_KEY_LENGTH && key.split('/').every((segment) => SEGMENT.test(segment));
}

/** `prefix`, checked: empty, or a key, or a key followed by `/`. */
export function checkPrefix(prefix: unknown): string {
  if (prefix === '') return prefix;
  if (typeof prefix === 'string' && prefix.endsWith('/')) return `${checkKey(prefix.slice(0, -1))}/`;
  return checkKey(prefix);
}

export function checkRange(range: ByteRange | undefined): void {
  if (range === undefined) return;
  const { offset, length } = (range ?? {}) as Partial<ByteRange>;
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset! < 0 || length! < 1) {
    throw new FabricError('INVALID_ARGUMENT', `a byte range is an offset >= 0 and a length >= 1, got ${describe(JSON.stringify(range))}`);
  }
}

export function checkCondition(condition: BlobCondition | undefined): void {
  if (condition === undefined) return;
  const { ifNoneMatch, ifMatch } = condition as { ifNoneMatch?: unknown; ifMatch?: unknown };
  const createOnly = ifNoneMatch === '*' && ifMatch === undefined;
  const replaceOnly = ifNoneMatch === undefined && typeof ifMatch === 'string' && /^[\x21-\x7e]{1,200}$/.test(ifMatch);
  if (!createOnly && !replaceOnly) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `a condition is { ifNoneMatch: '*' } or { ifMatch: <version> }, got ${describe(JSON.stringify(condition))}`,
    );
  }
}

export function checkBytes(bytes: unknown): void {
  if (!(bytes instanceof Uint8Array)) throw new FabricError('INVALID_ARGUMENT', `a blob's bytes are a Uint8Array, got ${describe(bytes)}`);
}
