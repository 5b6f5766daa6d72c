// A blob's version in the POSIX backend: a digest of the file's device, inode, size, mtime and ctime (in
// nanoseconds). Every write goes to a fresh temp file renamed over the key, so a new write is a new inode
// with a fresh ctime, and the version changes even when the bytes do not (S3's ETag, an MD5 of the bytes,
// repeats for equal bytes; here that cannot make a stale holder's If-Match pass). Files are never changed
// in place, so the version read with a file's bytes (fstat on the same descriptor) names those bytes.
// Chosen over a content hash because head and list then cost a stat, not a read of a whole segment.
// The one way two writes share a version is an inode number reused within one tick of the file system's
// clock with the same size: negligible, and only a stale writer's If-Match could profit from it.
import { createHash } from 'node:crypto';
import type { BigIntStats } from 'node:fs';

export function versionOf(stat: BigIntStats): string {
  const identity = `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeNs}:${stat.ctimeNs}`;
  return createHash('sha256').update(identity).digest('hex').slice(0, 32);
}
