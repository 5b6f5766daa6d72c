// The ETag S3 gives the bytes of a put, computed here: the MD5 of the bytes for a single PUT, and for a
// multipart upload the MD5 of the parts' MD5s followed by "-<parts>". SeaweedFS computes them the same
// way. Used only to recognise a write of one's own whose answer was lost (s3-blob-store.ts,
// multipart-writer.ts).
import { createHash } from 'node:crypto';

/** The quoted ETag of `bytes` written whole, or in parts of `partBytes`. */
export function etagOf(bytes: Uint8Array, partBytes?: number): string {
  if (partBytes === undefined) return `"${createHash('md5').update(bytes).digest('hex')}"`;
  const parts: string[] = [];
  for (let offset = 0; offset < bytes.byteLength; offset += partBytes) {
    parts.push(
      createHash('md5')
        .update(bytes.subarray(offset, offset + partBytes))
        .digest('hex'),
    );
  }
  return etagOfParts(parts);
}

/** The quoted ETag of a multipart upload whose parts had these ETags (each an MD5 in hex, quoted or not). */
export function etagOfParts(partEtags: readonly string[]): string {
  const whole = createHash('md5');
  for (const etag of partEtags) whole.update(Buffer.from(etag.replace(/"/g, ''), 'hex'));
  return `"${whole.digest('hex')}-${partEtags.length}"`;
}
