// The ETag S3 gives the bytes of a put, computed here: the MD5 of the bytes for a single PUT, and for a
// multipart upload the MD5 of the parts' MD5s followed by "-<parts>". SeaweedFS computes them the same
// way. Used only to recognise a write of one's own whose answer was lost (s3-blob-store.ts).
import { createHash } from 'node:crypto';

/** The quoted ETag of `bytes` written whole, or in parts of `partBytes`. */
export function etagOf(bytes: Uint8Array, partBytes?: number): string {
  if (partBytes === undefined) return `"${createHash('md5').update(bytes).digest('hex')}"`;
  const whole = createHash('md5');
  let parts = 0;
  for (let offset = 0; offset < bytes.byteLength; offset += partBytes, parts++) {
    whole.update(
      createHash('md5')
        .update(bytes.subarray(offset, offset + partBytes))
        .digest(),
    );
  }
  return `"${whole.digest('hex')}-${parts}"`;
}
