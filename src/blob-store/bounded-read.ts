// A small blob (a manifest, a manifest-log record) read whole, in one request where the store can: its first
// bytes and its size come back together (readStartInto), so a blob that fits the first read costs no HEAD
// before it. A blob that says it is larger than its kind may be is refused before the rest is read: a
// bucket's writer could plant one of any size.
import { FabricError } from '../fabric/errors';
import type { BlobRead, BlobStore } from './blob-store';
import { readStartInto } from './ranged-read-into';

/** What the first request asks for: a manifest of a few thousand pages, any log record. */
const FIRST_READ_BYTES = 256 * 1024;

/** The whole blob and its version, undefined when there is none; INTEGRITY when it has more than `maxBytes`. */
export async function readBounded(store: BlobStore, key: string, maxBytes: number, what: string): Promise<BlobRead | undefined> {
  const tooLarge = (size: number) => new FabricError('INTEGRITY', `${what} is implausibly large (${size} bytes, at most ${maxBytes})`);
  const first = Buffer.alloc(Math.min(FIRST_READ_BYTES, maxBytes));
  const start = await readStartInto(store, key, first);
  if (start === undefined) return undefined;
  const { head } = start;
  if (head.size > maxBytes) throw tooLarge(head.size);
  if (start.bytes === head.size) return { ...head, bytes: first.subarray(0, start.bytes) };
  // Whole again, not just the rest: a rest of another version (replaced in between) could not be told apart.
  const whole = await store.get(key);
  if (whole !== undefined && whole.size > maxBytes) throw tooLarge(whole.size);
  return whole;
}
