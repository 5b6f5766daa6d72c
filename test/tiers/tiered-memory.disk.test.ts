// TieredMemory with the encrypted disk tier: byte-exact round trips through every tier path, a restore
// by a second process after the first was killed, corrupted and swapped files, a full disk, automatic
// host -> disk eviction, concurrency, and no leaked blocks or files afterwards.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { NativeAllocator } from '../../src/fabric';
import { ColdStore, KeyRing } from '../../src/tiers/cold';
import { TieredMemory, type TieredMemoryOptions } from '../../src/tiers/tiered-memory';
import { concatBytes, expectSameBytes, tinyShape, tokenBytes } from '../fabric/implementations';

const run = promisify(execFile);
const key = randomBytes(32);
let directory: string;
let pool: NativeAllocator | undefined;
let cold: ColdStore | undefined;

beforeEach(async () => {
  directory = await fsp.mkdtemp(path.join(os.tmpdir(), 'kvfabric-disk-'));
});
afterEach(async () => {
  pool?.close();
  pool = undefined;
  await cold?.close();
  cold = undefined;
  await fsp.rm(directory, { recursive: true, force: true });
});

async function open(blockCount = 32, hostBlockCount = 32, extra: Partial<TieredMemoryOptions> = {}, dir = directory) {
  pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount, hostBlockCount });
  cold = await ColdStore.open({ directory: dir, keyRing: new KeyRing([{ id: 'k1', key }], 'k1') });
  return { pool, cold, memory: new TieredMemory({ pool, cold, deviceLowWatermark: 0, hostLowWatermark: 0, ...extra }) };
}

/** Files of the disk tier (segments and manifests), temp files included. */
async function filesIn(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await fsp.readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) out.push(path.join(entry.parentPath ?? (entry as unknown as { path: string }).path, entry.name));
  }
  return out;
}

async function segmentFiles(): Promise<string[]> {
  return (await filesIn(directory)).filter((f) => !f.includes('manifest'));
}

describe('TieredMemory with the disk tier', () => {
  it('keeps an attachment with the pages it was appended with: forks inherit it, a second process adopts it', async () => {
    const { pool: first, cold: firstCold, memory } = await open();
    memory.create('a', 1);
    await memory.append('a', tokenBytes(5, 1), { ids: [1, 2, 3, 4, 5] });
    await memory.fork('a', 'child');
    await memory.append('child', tokenBytes(1, 2), { ids: [1, 2, 3, 4, 5, 6] });
    expect(memory.attachment('a')).toEqual({ ids: [1, 2, 3, 4, 5] });
    expect(memory.attachment('child')).toEqual({ ids: [1, 2, 3, 4, 5, 6] });
    await memory.spill('a');
    await memory.append('a', tokenBytes(1, 3), { ids: [1, 2, 3, 4, 5, 7] }); // not durable yet: the disk keeps the older pair
    first.close();
    await firstCold.close();
    pool = undefined;
    cold = undefined;
    const { memory: adopter } = await open();
    await adopter.recover('a', { expectedTenant: 1 });
    expect(adopter.contextStats('a').tokens).toBe(5);
    expect(adopter.attachment('a')).toEqual({ ids: [1, 2, 3, 4, 5] });
  });

  it('refuses a manifest whose attachment is not a JSON object, or without its page checksums, writing nothing', async () => {
    const { cold } = await open();
    const manifest = {
      contextId: 'x',
      tenant: 1,
      version: 1,
      tokens: 0,
      layout: { bytesPerToken: 1, tokensPerBlock: 1, blockBytes: 1 },
      pages: [],
      pageChecksums: [],
      createdAt: 'now',
    };
    await expect(cold.writeManifest({ ...manifest, attachment: [1, 2] as never })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    const { pageChecksums: _, ...withoutChecksums } = manifest;
    await expect(cold.writeManifest(withoutChecksums as never)).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(/pageChecksums/),
    });
    await expect(cold.readManifest('x')).rejects.toThrow(/manifest is missing/);
  });

  it('round-trips byte-exact through device -> host -> disk -> device and each step alone', async () => {
    const { pool, memory } = await open();
    memory.create('a', 1);
    await memory.append('a', tokenBytes(11, 1));
    await memory.demote('a', 'host');
    await memory.demote('a', 'disk');
    expect(memory.residency('a')).toBe('disk');
    expect(pool.stats()).toMatchObject({ usedBlocks: 0, host: { usedBlocks: 0 }, diskOnlyBlocks: 3 });
    await memory.promote('a');
    expect(memory.residency('a')).toBe('device');
    expectSameBytes(await memory.read('a', 0, 11), tokenBytes(11, 1));

    const version = memory.durableVersion('a');
    await memory.demote('a', 'disk'); // device -> disk in one call; unchanged pages are not rewritten
    expect(memory.stats().disk.liveSegments).toBe(1);
    expect(memory.durableVersion('a')).toBe(version); // nothing changed: same durable copy
    await memory.demote('a', 'disk'); // a repeated demotion is a no-op
    expect(memory.durableVersion('a')).toBe(version);
    expectSameBytes(await memory.read('a', 0, 11), tokenBytes(11, 1)); // a read restores
    await memory.append('a', tokenBytes(2, 9)); // the last durable copy stays until a newer one replaces it
    expect(memory.durableVersion('a')).toBe(version);
    await memory.spill('a'); // durable while staying resident
    expect(memory.residency('a')).toBe('device');
    expect(memory.durableVersion('a')).toBe(version + 1);
    await memory.release('a');
    expect(pool.stats()).toMatchObject({ usedBlocks: 0, host: { usedBlocks: 0 }, diskOnlyBlocks: 0, diskCopies: 0 });
    expect(await filesIn(directory)).toEqual([]);
  });

  it('writes blocks shared by forks once and brings them back shared', async () => {
    const { pool, memory } = await open();
    memory.create('parent', 1);
    await memory.append('parent', tokenBytes(8, 1));
    await memory.fork('parent', 'child');
    await memory.append('child', tokenBytes(5, 2));
    await memory.demote('parent', 'disk');
    await memory.demote('child', 'disk');
    expect(pool.stats()).toMatchObject({ diskOnlyBlocks: 4, diskCopies: 4, sharedBlocks: 2 });
    await memory.promote('parent');
    await memory.promote('child');
    expect(pool.stats()).toMatchObject({ usedBlocks: 4, sharedBlocks: 2 });
    expectSameBytes(await memory.read('child', 0, 13), concatBytes(tokenBytes(8, 1), tokenBytes(5, 2)));
    await memory.release('parent');
    await memory.release('child');
    expect(await filesIn(directory)).toEqual([]);
  });

  it('reports the pages of an offloaded parent that a resident fork keeps on the device as device', async () => {
    const { memory } = await open();
    memory.create('parent', 1);
    await memory.append('parent', tokenBytes(8, 1));
    await memory.fork('parent', 'child');
    await memory.demote('parent', 'disk');
    expect(memory.residency('parent')).toBe('device');
    expect(memory.durableVersion('parent')).toBeGreaterThan(0);
    await memory.demote('child', 'host');
    expect(memory.residency('parent')).toBe('host');
  });

  describe('two processes sharing the directory', () => {
    async function second() {
      const otherPool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 32, hostBlockCount: 32 });
      const otherCold = await ColdStore.open({ directory, keyRing: new KeyRing([{ id: 'k1', key }], 'k1') });
      const memory = new TieredMemory({ pool: otherPool, cold: otherCold, deviceLowWatermark: 0, hostLowWatermark: 0 });
      return { memory, close: async () => (otherPool.close(), await otherCold.close()) };
    }

    it('keeps the segments of a parent that the manifest of a fork written elsewhere still names', async () => {
      const { memory: a } = await open();
      a.create('parent', 1);
      await a.append('parent', tokenBytes(8, 1));
      await a.spill('parent');
      await a.fork('parent', 'child');
      await a.append('child', tokenBytes(4, 2));
      await a.spill('child');
      const b = await second();
      try {
        await b.memory.recover('parent');
        await b.memory.append('parent', tokenBytes(4, 3));
        await b.memory.spill('parent'); // replaces the manifest that named the shared prefix
        await b.memory.release('parent');
        await b.memory.recover('child');
        expectSameBytes(await b.memory.read('child', 0, 12), concatBytes(tokenBytes(8, 1), tokenBytes(4, 2)));
        await b.memory.release('child');
      } finally {
        await b.close();
      }
    });

    it('rewrites disk copies another process deleted before naming them in a manifest', async () => {
      const { memory: a, cold } = await open();
      a.create('parent', 1);
      await a.append('parent', tokenBytes(8, 1));
      await a.spill('parent');
      await a.fork('parent', 'child'); // shares the parent's disk copies, has no manifest of its own
      const b = await second();
      try {
        await b.memory.recover('parent');
        await b.memory.release('parent'); // nothing on disk names the prefix now: b deletes its segment
      } finally {
        await b.close();
      }
      expect(await cold.listSegments()).toEqual([]);
      await a.demote('child', 'disk');
      await a.promote('child');
      expectSameBytes(await a.read('child', 0, 8), tokenBytes(8, 1));
      const c = await second();
      try {
        await c.memory.recover('child');
        expectSameBytes(await c.memory.read('child', 0, 8), tokenBytes(8, 1));
      } finally {
        await c.close();
      }
    });
  });

  it('restores in a new process what a killed process wrote, from the manifests alone', async () => {
    const fixture = path.join(__dirname, 'fixtures', 'spill-and-die.ts');
    const result = await run(process.execPath, ['--import', 'tsx', fixture, directory, key.toString('hex')], {
      cwd: path.resolve(__dirname, '../..'),
    }).then(
      () => ({ stdout: '', signal: 'none: the process was expected to kill itself' }),
      (err: { stdout: string; signal: string }) => err,
    );
    expect(result.signal).toBe('SIGKILL');
    const versions = JSON.parse(result.stdout) as { parent: number; child: number };

    const { pool, cold, memory } = await open();
    await expect(memory.recover('parent', { expectedTenant: 8 })).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    await expect(memory.recover('parent', { minVersion: versions.parent + 1 })).rejects.toMatchObject({ code: 'INTEGRITY' });
    await memory.recover('parent', { expectedTenant: 7, minVersion: versions.parent });
    await memory.recover('child', { expectedTenant: 7, minVersion: versions.child });
    expect(memory.residency('parent')).toBe('disk');
    expectSameBytes(await memory.read('parent', 0, 10), tokenBytes(10, 1));
    expectSameBytes(await memory.read('child', 0, 13), concatBytes(tokenBytes(10, 1), tokenBytes(3, 2)));
    await memory.release('parent');
    await memory.release('child');
    expect(await cold.listManifests()).toEqual([]);
    expect(await cold.listSegments()).toEqual([]);
    expect(pool.stats()).toMatchObject({ usedBlocks: 0, diskCopies: 0 });
  });

  describe('damaged files give INTEGRITY naming the context, never wrong bytes, and lose nothing', () => {
    async function spilledPair() {
      const opened = await open();
      for (const [id, seed] of [
        ['left', 1],
        ['right', 2],
      ] as const) {
        opened.memory.create(id, 1);
        await opened.memory.append(id, tokenBytes(8, seed));
        await opened.memory.demote(id, 'disk');
      }
      return opened;
    }

    async function expectIntegrity(memory: TieredMemory, pool: NativeAllocator, id: string) {
      const before = pool.stats();
      await expect(memory.promote(id)).rejects.toMatchObject({ code: 'INTEGRITY', message: expect.stringContaining(id) });
      expect(memory.residency(id)).toBe('disk');
      expect(pool.stats()).toEqual(before);
    }

    it('a flipped byte', async () => {
      const { pool, memory } = await spilledPair();
      const [segment] = await segmentFiles();
      const bytes = await fsp.readFile(segment!);
      bytes[bytes.length - 5]! ^= 0x40;
      await fsp.writeFile(segment!, bytes);
      const outcomes: string[] = [];
      for (const id of ['left', 'right']) {
        outcomes.push(
          await memory.promote(id).then(
            () => 'restored',
            (err: { code: string }) => err.code,
          ),
        );
      }
      expect([...outcomes].sort()).toEqual(['INTEGRITY', 'restored']); // exactly the context that owned the segment
      const damaged = outcomes.indexOf('INTEGRITY') === 0 ? 'left' : 'right';
      await expectIntegrity(memory, pool, damaged); // and it stays on disk, retryable
    });

    it('a truncated file', async () => {
      const { pool, memory } = await spilledPair();
      for (const segment of await segmentFiles()) await fsp.truncate(segment, 100);
      await expectIntegrity(memory, pool, 'left');
    });

    it('a deleted file', async () => {
      const { pool, memory } = await spilledPair();
      for (const segment of await segmentFiles()) await fsp.rm(segment);
      await expectIntegrity(memory, pool, 'right');
    });

    it('files swapped between contexts', async () => {
      const { pool, memory } = await spilledPair();
      const [a, b] = await segmentFiles();
      const tmp = `${a}.swap`;
      await fsp.rename(a!, tmp);
      await fsp.rename(b!, a!);
      await fsp.rename(tmp, b!);
      await expectIntegrity(memory, pool, 'left');
      await expectIntegrity(memory, pool, 'right');
    });
  });

  it('checks every page it brings back against the checksum its manifest recorded: a mismatch is INTEGRITY naming context and page, nothing moves', async () => {
    const { cold: store, memory } = await open();
    const bytes = tokenBytes(10, 4); // 3 pages of 4 tokens
    memory.create('a', 1);
    await memory.append('a', bytes);
    await memory.demote('a', 'disk');
    // A manifest (written by a key holder, so it opens) whose page 1 checksum is not the page's.
    const manifest = await store.readManifest('a');
    expect(manifest.pageChecksums).toHaveLength(3);
    expect(manifest.pages.every((page) => page.checksum === undefined)).toBe(true); // the allocator checks, not the store
    await memory.dropLocalCopy('a');
    await store.writeManifest({
      ...manifest,
      version: manifest.version + 1,
      pageChecksums: manifest.pageChecksums!.map((sum, i) => (i === 1 ? (sum ^ 1) >>> 0 : sum)),
    });
    await memory.recover('a');
    await expect(memory.promote('a')).rejects.toMatchObject({
      code: 'INTEGRITY',
      message: expect.stringMatching(/^context a: page 1 does not match its checksum/),
    });
    expect(memory.contextStats('a')).toMatchObject({ resident: false, diskOnlyPages: 3 });
    // The recorded checksums back: every byte comes back.
    await memory.dropLocalCopy('a');
    await store.writeManifest({ ...manifest, version: manifest.version + 2 });
    await memory.recover('a');
    await memory.promote('a');
    expectSameBytes(await memory.read('a', 0, 10), bytes);
    await memory.release('a');
  });

  it('reports a full disk as STORAGE_FULL and keeps the context where it was', async (context) => {
    const mount = await fsp.mkdtemp(path.join(os.tmpdir(), 'kvfabric-full-'));
    try {
      await run('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', mount]);
    } catch {
      await fsp.rm(mount, { recursive: true, force: true });
      context.skip('cannot mount a small tmpfs here (needs root); the full-disk case is untested in this run');
      return;
    }
    try {
      // 64 KiB of disk, blocks of 2 KiB tokens x 4: a 40-token context does not fit.
      pool = new NativeAllocator({
        shape: { layers: 4, kvHeads: 2, headDim: 64, dtypeBytes: 2 },
        tokensPerBlock: 4,
        blockCount: 16,
        hostBlockCount: 16,
      });
      cold = await ColdStore.open({ directory: mount, keyRing: new KeyRing([{ id: 'k1', key }], 'k1') });
      const memory = new TieredMemory({ pool, cold, deviceLowWatermark: 0, hostLowWatermark: 0 });
      const kv = tokenBytes(40, 3, pool.layout.bytesPerToken);
      memory.create('big', 1);
      await memory.append('big', kv);
      await memory.demote('big', 'host');
      await expect(memory.demote('big', 'disk')).rejects.toMatchObject({ code: 'STORAGE_FULL' });
      expect(memory.residency('big')).toBe('host');
      expect(pool.stats()).toMatchObject({ diskCopies: 0, host: { usedBlocks: 10 } });
      expect(await filesIn(mount)).toEqual([]); // no partial or temp file left behind
      await memory.promote('big');
      expectSameBytes(await memory.read('big', 0, 40), kv);
      await memory.release('big');
      await cold.close();
      cold = undefined;
    } finally {
      await run('umount', [mount]).catch(() => undefined);
      await fsp.rm(mount, { recursive: true, force: true });
    }
  });

  it('spills least recently used host contexts to disk when the host tier is full', async () => {
    const { pool, memory } = await open(8, 4);
    for (const id of ['a', 'b', 'c']) {
      memory.create(id, 1);
      await memory.append(id, tokenBytes(8, id.charCodeAt(0)));
    }
    await memory.demote('a', 'host');
    await memory.demote('b', 'host');
    await memory.demote('c', 'host'); // host holds 4 blocks: 'a' goes to disk
    expect(memory.residency('a')).toBe('disk');
    expect(memory.residency('b')).toBe('host');
    expect(memory.residency('c')).toBe('host');
    for (const id of ['a', 'b', 'c']) expectSameBytes(await memory.read(id, 0, 8), tokenBytes(8, id.charCodeAt(0)));
    expect(pool.stats().host.usedBlocks).toBeLessThanOrEqual(4);
  });

  it('moves many contexts to disk and back at once, ending at baseline with no files left', async () => {
    const { pool, memory } = await open(128, 64);
    const ids = Array.from({ length: 16 }, (_, i) => `ctx${i}`);
    for (const [i, id] of ids.entries()) {
      memory.create(id, 1 + (i % 2));
      await memory.append(id, tokenBytes(9 + i, i));
    }
    await Promise.all(ids.map((id) => memory.demote(id, 'disk')));
    await Promise.all(ids.map((id, i) => (i % 2 ? memory.promote(id) : memory.read(id, 0, 1))));
    for (const [i, id] of ids.entries()) expectSameBytes(await memory.read(id, 0, 9 + i), tokenBytes(9 + i, i));
    await Promise.all(ids.map((id) => memory.release(id)));
    expect(pool.stats()).toMatchObject({ usedBlocks: 0, host: { usedBlocks: 0 }, contexts: 0, diskCopies: 0 });
    expect(await filesIn(directory)).toEqual([]);
  });
});

describe('TieredMemory: segment files nobody uses', () => {
  it('keeps deletions that failed (an unreadable manifest in the directory) and finishes them later', async () => {
    const errors: string[] = [];
    const { memory } = await open(32, 32, { onBackgroundError: (what) => errors.push(what) });
    // A manifest written with another master key: its segments cannot be told from garbage, so no
    // segment may be deleted while it is there.
    const foreign = await ColdStore.open({ directory, keyRing: new KeyRing([{ id: 'k1', key: randomBytes(32) }], 'k1') });
    const stranger = new TieredMemory({ pool: new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8 }), cold: foreign });
    stranger.create('foreign', 1);
    await stranger.append('foreign', tokenBytes(4, 9));
    await stranger.spill('foreign');
    await foreign.close();

    memory.create('a', 1);
    await memory.append('a', tokenBytes(10, 1));
    await memory.demote('a', 'disk');
    const before = (await segmentFiles()).length;
    await memory.release('a');
    expect(errors).toEqual(['deleting 1 unused segment file(s)']);
    expect(memory.stats().disk.pendingDeletes).toBe(1);
    expect((await segmentFiles()).length).toBe(before);

    await fsp.rm(path.join(directory, 'manifests', 'foreign.manifest'), { force: true });
    const left = await fsp.readdir(path.join(directory, 'manifests'));
    expect(left.filter((name) => name.startsWith('foreign'))).toEqual([]);
    expect(await memory.sweepOrphanSegments(60_000)).toBe(0); // the foreign segment is too young for the sweep...
    expect(memory.stats().disk.pendingDeletes).toBe(0); // ...but the pending deletion went through
    expect((await segmentFiles()).length).toBe(before - 1);
  });

  it('discards the durable copy of a context it does not hold, readable or not', async () => {
    const first = await open();
    first.memory.create('gone', 1);
    await first.memory.append('gone', tokenBytes(9, 2));
    await first.memory.demote('gone', 'disk');
    first.memory.create('damaged', 1);
    await first.memory.append('damaged', tokenBytes(5, 3));
    await first.memory.demote('damaged', 'disk');
    // Another process (the first one's worker died): it never held either context.
    const other = new TieredMemory({ pool: new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8 }), cold: first.cold });
    await other.discard('gone');
    expect((await filesIn(directory)).some((file) => file.includes('gone'))).toBe(false);
    await expect(first.cold.readManifest('gone')).rejects.toMatchObject({ code: 'INTEGRITY' });

    const manifest = path.join(directory, 'manifests', 'damaged.manifest');
    await fsp.writeFile(manifest, 'not a manifest');
    await other.discard('damaged'); // unreadable: the manifest goes, its segments wait for the sweep
    expect((await filesIn(directory)).filter((file) => file.includes('manifest'))).toEqual([]);
    // (the first process still has both contexts' disk copies in its ledger; a sweep elsewhere takes the files)
    expect(await other.sweepOrphanSegments(0)).toBeGreaterThan(0);
    expect(await filesIn(directory)).toEqual([]);
  });

  it('refuses to discard a manifest sealed with a master key its ring lacks, and deletes nothing', async () => {
    const first = await open();
    first.memory.create('rotated', 1);
    await first.memory.append('rotated', tokenBytes(9, 6));
    await first.memory.demote('rotated', 'disk');
    const before = await filesIn(directory);
    // A worker on the same directory with another ring (a key rotation half done): it cannot read the manifest.
    const foreign = await ColdStore.open({ directory, keyRing: new KeyRing([{ id: 'k2', key: randomBytes(32) }], 'k2') });
    try {
      const other = new TieredMemory({ pool: new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8 }), cold: foreign });
      await expect(other.discard('rotated')).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    } finally {
      await foreign.close();
    }
    expect(await filesIn(directory)).toEqual(before);
    await first.memory.promote('rotated');
    expectSameBytes(await first.memory.read('rotated', 0, 9), tokenBytes(9, 6));
  });

  it('a spill slower than half the orphan age re-checks its own segments, so a sweep cannot leave its manifest pointing at nothing', async () => {
    const { memory, cold } = await open(32, 32, { orphanMinAgeMs: 0 });
    // A sweep in another process deletes the first segment this spill writes, before its manifest.
    const writeSegment = cold.writeSegment.bind(cold);
    let swept = false;
    cold.writeSegment = async (owner, blocks) => {
      const refs = await writeSegment(owner, blocks);
      if (!swept) {
        swept = true;
        await cold.deleteSegment(refs[0]!.segmentId);
      }
      return refs;
    };
    memory.create('a', 1);
    await memory.append('a', tokenBytes(13, 4));
    await memory.demote('a', 'disk');
    expect(swept).toBe(true);
    const other = new TieredMemory({
      pool: new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8, hostBlockCount: 8 }),
      cold,
    });
    await other.recover('a');
    expectSameBytes(await other.read('a', 0, 13), tokenBytes(13, 4));
  });
});
