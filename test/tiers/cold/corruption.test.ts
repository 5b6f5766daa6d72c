// Damage and tampering on disk: every case gives FabricError INTEGRITY naming the context, never bytes
// that differ from what was written. Files are changed the way a failing disk, a bad copy or an attacker
// with write access to the shared directory would.
import fs from 'node:fs';
import { crc32 } from 'node:zlib';

import { afterAll, beforeEach, describe, expect, it } from 'vitest';

import type { ColdBlockRef, ColdStore, SegmentOwner } from '../../../src/tiers/cold';
import { parseSegmentHeader, segmentGeometry } from '../../../src/tiers/cold/segment-header';
import {
  blocksOf,
  expectBlocks,
  expectCode,
  manifestOf,
  manifestPath,
  masterKey,
  openStore,
  ringOf,
  segmentPath,
  tempDir,
} from './helpers';

const BLOCK = 4096;
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

interface Context {
  owner: SegmentOwner;
  refs: ColdBlockRef[];
  blocks: Uint8Array[];
}

let dir: string;
let store: ColdStore;
let a: Context;
let b: Context;

async function offload(owner: SegmentOwner, seed: number): Promise<Context> {
  const blocks = blocksOf(3, BLOCK, seed);
  const refs = await store.writeSegment(owner, blocks);
  await store.writeManifest(manifestOf(owner, refs, BLOCK));
  return { owner, refs, blocks };
}

beforeEach(async () => {
  dir = tempDir('corrupt');
  dirs.push(dir);
  store = await openStore(dir, ringOf(masterKey('k1')));
  a = await offload({ tenant: 1, contextId: 'ctx-a', version: 1 }, 1);
  b = await offload({ tenant: 1, contextId: 'ctx-b', version: 1 }, 2);
  return () => store.close();
});

const segmentFile = (ctx: Context) => segmentPath(dir, ctx.refs[0]!.segmentId);
const headerOf = (ctx: Context) => {
  const bytes = fs.readFileSync(segmentFile(ctx));
  const parsed = parseSegmentHeader(bytes, bytes.length, 'test');
  if (!parsed.complete) throw new Error('header probe');
  return { bytes, ...parsed };
};
function flip(file: string, at: number): void {
  const bytes = fs.readFileSync(file);
  bytes[at]! ^= 0x01;
  fs.writeFileSync(file, bytes);
}
async function expectIntegrity(ctx: Context, message?: RegExp): Promise<void> {
  await expectCode(store.readBlocks(ctx.refs, ctx.owner.tenant), 'INTEGRITY', message ?? new RegExp(`context '${ctx.owner.contextId}'`));
}

describe('segment damage', () => {
  it('a flipped ciphertext byte fails that block with INTEGRITY; other blocks still read', async () => {
    const { geometry } = headerOf(a);
    flip(segmentFile(a), geometry.dataOffset + BLOCK + 100);
    await expectIntegrity(a, /context 'ctx-a'.*block 1 failed authentication/);
    expectBlocks(await store.readBlocks([a.refs[0]!, a.refs[2]!], 1), [a.blocks[0]!, a.blocks[2]!]);
  });

  it('a flipped byte anywhere in the header is INTEGRITY', async () => {
    const { geometry } = headerOf(a);
    const pristine = fs.readFileSync(segmentFile(a));
    for (let at = 0; at < geometry.headerBytes; at++) {
      const bytes = Buffer.from(pristine);
      bytes[at]! ^= 0x40;
      fs.writeFileSync(segmentFile(a), bytes);
      await expectIntegrity(a).catch((err: Error) => {
        throw new Error(`header byte ${at}: ${err.message}`);
      });
    }
  });

  it.each([
    ['empty', () => 0],
    ['inside the fixed header', () => 50],
    ['at the end of the header', (h: number, _d: number) => h],
    ['at the start of the data', (_h: number, d: number) => d],
    ['in the middle of a block', (_h: number, d: number) => d + BLOCK + BLOCK / 2],
    ['one byte short', (_h: number, d: number) => d + 3 * BLOCK - 1],
  ])('a segment truncated %s is INTEGRITY', async (_name, length) => {
    const { geometry } = headerOf(a);
    fs.truncateSync(segmentFile(a), length(geometry.headerBytes, geometry.dataOffset));
    await expectIntegrity(a, /context 'ctx-a'.*truncated/);
  });

  it('a segment with bytes appended is INTEGRITY', async () => {
    fs.appendFileSync(segmentFile(a), Buffer.alloc(1));
    await expectIntegrity(a, /longer than its header says/);
  });

  it('a deleted segment is INTEGRITY', async () => {
    fs.rmSync(segmentFile(a));
    await expectIntegrity(a, /context 'ctx-a'.*missing/);
  });

  it("two contexts' segment files swapped are INTEGRITY for both", async () => {
    const fileA = segmentFile(a);
    const fileB = segmentFile(b);
    fs.renameSync(fileA, `${fileA}.x`);
    fs.renameSync(fileB, fileA);
    fs.renameSync(`${fileA}.x`, fileB);
    await expectIntegrity(a, /context 'ctx-a'.*(renamed or swapped)/);
    await expectIntegrity(b, /context 'ctx-b'.*(renamed or swapped)/);
  });

  it('a swapped segment whose header is forged to match (id, owner, CRC) still fails authentication', async () => {
    // B's ciphertext and wrapped key under A's name, with A's segment id and owner in a re-CRC'd header:
    // only the associated data (A's refs: segment, owner, index) can catch it.
    for (const victim of [a.owner, { ...a.owner, version: 2 }, { ...a.owner, tenant: 1, contextId: 'ctx-b' }]) {
      const stolen = Buffer.from(fs.readFileSync(segmentFile(b)));
      const forged = forgeHeader(stolen, a.refs[0]!.segmentId, victim);
      fs.writeFileSync(segmentFile(a), forged);
      const refs = a.refs.map((r) => ({ ...r, owner: victim }));
      await expectCode(store.readBlocks(refs, 1), 'INTEGRITY', /failed authentication/);
    }
  });

  it('two blocks swapped inside a segment (ciphertext and tags) are INTEGRITY', async () => {
    const { bytes, geometry } = headerOf(a);
    const tagsAt = geometry.headerBytes - 4 - 16 * 3;
    const swapped = Buffer.from(bytes);
    bytes.copy(swapped, geometry.dataOffset, geometry.dataOffset + BLOCK, geometry.dataOffset + 2 * BLOCK);
    bytes.copy(swapped, geometry.dataOffset + BLOCK, geometry.dataOffset, geometry.dataOffset + BLOCK);
    bytes.copy(swapped, tagsAt, tagsAt + 16, tagsAt + 32);
    bytes.copy(swapped, tagsAt + 16, tagsAt, tagsAt + 16);
    swapped.writeUInt32BE(crc32(swapped.subarray(0, geometry.headerBytes - 4)), geometry.headerBytes - 4);
    fs.writeFileSync(segmentFile(a), swapped);
    await expectCode(store.readBlocks([a.refs[0]!], 1), 'INTEGRITY', /block 0 failed authentication/);
    await expectCode(store.readBlocks([a.refs[1]!], 1), 'INTEGRITY', /block 1 failed authentication/);
    expectBlocks(await store.readBlocks([a.refs[2]!], 1), [a.blocks[2]!]);
  });

  it('refs that point at the right block under another index, owner or version are INTEGRITY', async () => {
    const r = a.refs[0]!;
    await expectCode(store.readBlocks([{ ...r, owner: { ...r.owner, version: 2 } }], 1), 'INTEGRITY');
    await expectCode(store.readBlocks([{ ...r, owner: { ...r.owner, contextId: 'ctx-b' } }], 1), 'INTEGRITY', /context 'ctx-b'/);
  });

  it("a block whose checksum differs from the manifest's is INTEGRITY", async () => {
    const r = a.refs[1]!;
    await expectCode(
      store.readBlocks([{ ...r, checksum: (r.checksum! + 1) >>> 0 }], 1),
      'INTEGRITY',
      /block 1 decrypted but its CRC-32 differs/,
    );
  });
});

describe('manifest damage', () => {
  it('a flipped byte anywhere in the manifest is INTEGRITY', async () => {
    const file = manifestPath(dir, 'ctx-a');
    const pristine = fs.readFileSync(file);
    for (let at = 0; at < pristine.length; at++) {
      const bytes = Buffer.from(pristine);
      bytes[at]! ^= 0x80;
      fs.writeFileSync(file, bytes);
      await expectCode(store.readManifest('ctx-a'), 'INTEGRITY', /context 'ctx-a'/).catch((err: Error) => {
        throw new Error(`manifest byte ${at}: ${err.message}`);
      });
    }
  });

  it.each([0, 10, 60, -17, -1])('a manifest truncated to %i bytes is INTEGRITY', async (length) => {
    const file = manifestPath(dir, 'ctx-a');
    const size = fs.statSync(file).size;
    fs.truncateSync(file, length < 0 ? size + length : length);
    await expectCode(store.readManifest('ctx-a'), 'INTEGRITY', /context 'ctx-a'.*(truncated|corrupted)/);
  });

  it("another context's manifest copied over is INTEGRITY", async () => {
    fs.copyFileSync(manifestPath(dir, 'ctx-b'), manifestPath(dir, 'ctx-a'));
    await expectCode(store.readManifest('ctx-a'), 'INTEGRITY', /context 'ctx-a'.*failed authentication/);
  });

  it('a deleted manifest is INTEGRITY (hasManifest tells absence apart)', async () => {
    fs.rmSync(manifestPath(dir, 'ctx-a'));
    await expectCode(store.readManifest('ctx-a'), 'INTEGRITY', /context 'ctx-a'.*missing/);
    expect(await store.hasManifest('ctx-a')).toBe(false);
  });

  it('a replayed older manifest is caught only against the version the caller trusts (minVersion)', async () => {
    const file = manifestPath(dir, 'ctx-a');
    const v1 = fs.readFileSync(file);
    const v2owner = { ...a.owner, version: 2 };
    await offload(v2owner, 3);
    fs.writeFileSync(file, v1);
    // Authentic, just old: without outside knowledge it reads as version 1 ...
    expect((await store.readManifest('ctx-a')).version).toBe(1);
    // ... and the workflow that knows version 2 exists rejects it.
    await expectCode(store.readManifest('ctx-a', { minVersion: 2 }), 'INTEGRITY', /version 1 is older than the expected 2/);
  });

  it('a corrupt manifest makes orphanSegments fail rather than call its segments garbage', async () => {
    flip(manifestPath(dir, 'ctx-a'), 70);
    await expectCode(store.orphanSegments(), 'INTEGRITY', /context 'ctx-a'/);
  });
});

/** B's segment bytes with the header rewritten to claim `segmentId` and `owner`, CRC recomputed. */
function forgeHeader(segment: Buffer, segmentId: string, owner: SegmentOwner): Buffer {
  const parsed = parseSegmentHeader(segment, segment.length, 'forge');
  if (!parsed.complete) throw new Error('header probe');
  const { header, geometry } = parsed;
  const keyId = Buffer.from(header.keyId);
  const contextId = Buffer.from(owner.contextId);
  const fresh = segmentGeometry(header.keyId, owner.contextId, header.blockCount, header.blockBytes);
  expect(fresh.dataOffset).toBe(geometry.dataOffset);
  const out = Buffer.alloc(fresh.fileBytes);
  segment.copy(out, 0, 0, 96);
  out.writeUInt32BE(fresh.headerBytes, 12);
  out.writeUInt32BE(owner.tenant, 28);
  out.writeBigUInt64BE(BigInt(owner.version), 32);
  Buffer.from(segmentId, 'hex').copy(out, 40);
  out.writeUInt16BE(contextId.length, 96);
  let at = 98;
  at += keyId.copy(out, at);
  at += contextId.copy(out, at);
  at += header.tags.copy(out, at);
  out.writeUInt32BE(crc32(out.subarray(0, at)), at);
  segment.copy(out, fresh.dataOffset, geometry.dataOffset);
  return out;
}
