// Test data for the cold-tier tests and their child processes (no vitest here, so fixtures can import it):
// temp directories, keys, recognisable blocks and manifests built from refs.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { KeyRing, type ColdBlockRef, type ContextManifest, type MasterKey, type SegmentOwner } from '../../../src/tiers/cold';

/** The crash test's offloads: big enough that a kill often lands inside a write. */
export const CRASH_BLOCKS = 24;
export const CRASH_BLOCK_BYTES = 64 * 1024;

export function tempDir(label: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `kvfabric-cold-${label}-`));
}

export function masterKey(id: string): MasterKey & { key: Buffer } {
  return { id, key: randomBytes(32) };
}

export function ringOf(...keys: MasterKey[]): KeyRing {
  return new KeyRing(keys, keys[keys.length - 1]!.id);
}

/** Blocks whose bytes depend on seed and position, so any mix-up shows. */
export function blocksOf(count: number, blockBytes: number, seed: number): Uint8Array[] {
  return Array.from({ length: count }, (_, b) => {
    const block = new Uint8Array(blockBytes);
    for (let i = 0; i < blockBytes; i++) block[i] = (seed * 131 + b * 31 + i * 7 + 1) & 0xff;
    return block;
  });
}

export function sameBytes(actual: Uint8Array, expected: Uint8Array): boolean {
  return Buffer.from(actual.buffer, actual.byteOffset, actual.byteLength).equals(
    Buffer.from(expected.buffer, expected.byteOffset, expected.byteLength),
  );
}

/** A manifest whose pages are `refs`, for blocks of `blockBytes` holding 4 tokens each. */
export function manifestOf(owner: SegmentOwner, refs: ColdBlockRef[], blockBytes = 32): ContextManifest {
  const bytesPerToken = blockBytes / 4;
  return {
    contextId: owner.contextId,
    tenant: owner.tenant,
    version: owner.version,
    tokens: refs.length * 4,
    layout: { bytesPerToken, tokensPerBlock: 4, blockBytes },
    pages: refs,
    pageChecksums: refs.map(() => 0),
    createdAt: new Date(0).toISOString(),
  };
}
