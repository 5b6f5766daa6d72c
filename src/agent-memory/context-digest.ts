// The digest a workflow keeps of its context, so a resume is checked against what the workflow recorded
// without the workflow holding a byte and without the worker re-reading one: SHA-256 over the ordered
// page checksums (CRC-32C of each page's tokens, kept by the allocator and checked by every tier move
// as it copies the page) and the token count. A stale or swapped copy has other checksums or another
// order; a changed byte fails the move that copies it. A prefix ending inside a page re-reads that
// page's first tokens only.
import { createHash } from 'node:crypto';

import { crc32c } from '../fabric/checksum';

const DOMAIN = 'kvfabric.context-digest.v2';

/** Carried in workflow state (text and numbers, never bytes); DOMAIN names how `value` is computed. */
export interface DigestState {
  /** SHA-256 of the context's first `tokens` tokens, as above, in base64url (43 characters: it is in every turn's history). */
  value: string;
  tokens: number;
}

/** The digest of `tokens` tokens whose pages (tokensPerBlock each, the last one partial) have these checksums. */
export function pageDigest(checksums: ArrayLike<number>, tokens: number, tokensPerBlock: number): DigestState {
  const pages = Math.ceil(tokens / tokensPerBlock);
  if (checksums.length !== pages) throw new RangeError(`${tokens} tokens fill ${pages} pages, got ${checksums.length} checksums`);
  const header = Buffer.alloc(8);
  header.writeBigUInt64BE(BigInt(tokens));
  const sums = Buffer.alloc(4 * pages);
  for (let i = 0; i < pages; i++) sums.writeUInt32BE(checksums[i]! >>> 0, 4 * i);
  const value = createHash('sha256').update(DOMAIN).update(header).update(sums).digest('base64url');
  return { value, tokens };
}

export function emptyDigest(): DigestState {
  return pageDigest([], 0, 1);
}

/** The digest of token-major bytes: what a context holding them has (tests and tools; no allocator needed). */
export function digestOfBytes(bytes: Uint8Array, bytesPerToken: number, tokensPerBlock: number): DigestState {
  const tokens = bytes.byteLength / bytesPerToken;
  const pageBytes = tokensPerBlock * bytesPerToken;
  const sums: number[] = [];
  for (let at = 0; at < bytes.byteLength; at += pageBytes)
    sums.push(crc32c(bytes.subarray(at, Math.min(at + pageBytes, bytes.byteLength))));
  return pageDigest(sums, tokens, tokensPerBlock);
}
