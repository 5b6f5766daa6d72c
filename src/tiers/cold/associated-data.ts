// What ties each ciphertext to its place: the AES-GCM IV and associated data of segment blocks and
// manifests. The associated data comes from what the reader expects (the authenticated manifest's refs),
// never from the file being read, so a block moved to another context, segment, index or version fails
// its tag instead of decrypting.

import type { SegmentOwner } from './types';

export const IV_BYTES = 12;
export const TAG_BYTES = 16;
const BLOCK_DOMAIN = Buffer.from('kvfabric.cold.block.v1\0', 'latin1');
const MANIFEST_DOMAIN = Buffer.from('kvfabric.cold.manifest.v1\0', 'latin1');
const MANIFEST_LOG_DOMAIN = Buffer.from('kvfabric.cold.manifest-log.v1\0', 'latin1');

/**
 * The 96-bit big-endian counter `n` as an IV. Every data key is fresh random and encrypts one file only,
 * so counting items within that file never repeats an IV under a key, with no randomness or state to keep.
 */
export function counterIv(n: number): Buffer {
  const iv = Buffer.alloc(IV_BYTES);
  iv.writeUInt32BE(n, IV_BYTES - 4);
  return iv;
}

/**
 * Concatenation into memory of its own: these travel to the crypto threads, and a Buffer from Node's
 * shared pool would take its whole 8 KiB slab (other data) along.
 */
function concatOwned(parts: Uint8Array[]): Buffer {
  const out = Buffer.alloc(parts.reduce((sum, part) => sum + part.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}

/** Fixed-size fields first and the one variable field last, so distinct inputs never encode alike. */
export function blockAad(segmentId: Uint8Array, index: number, blockBytes: number, owner: SegmentOwner): Buffer {
  const fixed = Buffer.alloc(16 + 4 + 4 + 4 + 8);
  fixed.set(segmentId, 0);
  fixed.writeUInt32BE(index, 16);
  fixed.writeUInt32BE(blockBytes, 20);
  fixed.writeUInt32BE(owner.tenant, 24);
  fixed.writeBigUInt64BE(BigInt(owner.version), 28);
  return concatOwned([BLOCK_DOMAIN, fixed, Buffer.from(owner.contextId, 'utf8')]);
}

/** Binds a manifest's ciphertext to its authenticated file header and to the context id asked for. */
export function manifestAad(header: Uint8Array, contextId: string): Buffer {
  const headerLength = Buffer.alloc(4);
  headerLength.writeUInt32BE(header.byteLength);
  return concatOwned([MANIFEST_DOMAIN, headerLength, header, Buffer.from(contextId, 'utf8')]);
}

/** Binds a manifest-log record's ciphertext to its header, its sequence number and its context. */
export function manifestLogAad(header: Uint8Array, sequence: number, contextId: string): Buffer {
  const fixed = Buffer.alloc(4 + 8);
  fixed.writeUInt32BE(header.byteLength);
  fixed.writeBigUInt64BE(BigInt(sequence), 4);
  return concatOwned([MANIFEST_LOG_DOMAIN, fixed, header, Buffer.from(contextId, 'utf8')]);
}
