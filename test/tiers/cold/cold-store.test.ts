// ColdStore on real files and real crypto: round trips, manifests, listing, orphans, concurrency,
// argument checks and lifecycle. Both I/O paths run: O_DIRECT (4 KiB-multiple blocks) and buffered.
import fs from 'node:fs';
import { inspect } from 'node:util';

import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { ColdStore, type ColdBlockRef, type KeyRing } from '../../../src/tiers/cold';
import { blocksOf, expectBlocks, expectCode, filesUnder, manifestOf, masterKey, openStore, ringOf, tempDir } from './helpers';

const dirs: string[] = [];
const stores: ColdStore[] = [];
afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
});
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

async function freshStore(
  ring: KeyRing = ringOf(masterKey('k1')),
  extra: Parameters<typeof openStore>[2] = {},
): Promise<{ store: ColdStore; dir: string }> {
  const dir = tempDir('store');
  dirs.push(dir);
  const store = await openStore(dir, ring, extra);
  stores.push(store);
  return { store, dir };
}

describe.each([
  // Enough blocks that a segment spans several crypto jobs (4 MiB each) and its header several pages.
  { path: 'direct I/O', blockBytes: 8192, count: 1100, directIo: true },
  { path: 'buffered I/O', blockBytes: 8192, count: 1100, directIo: false },
  { path: 'tiny blocks, buffered', blockBytes: 32, count: 2100, directIo: true },
  { path: 'blocks larger than a staging slot', blockBytes: 4 * 1024 * 1024 + 4096, count: 3, directIo: true },
])('round trip ($path, $blockBytes-byte blocks)', ({ blockBytes, count, directIo }) => {
  it('reads back every byte of many blocks across several segments, in any order and mix', async () => {
    const { store } = await freshStore(undefined, { directIo });
    const written: Array<{ refs: ColdBlockRef[]; blocks: Uint8Array[] }> = [];
    for (let s = 0; s < 4; s++) {
      const blocks = blocksOf(count, blockBytes, s);
      written.push({ refs: await store.writeSegment({ tenant: 7, contextId: `agent-${s}`, version: 3 }, blocks), blocks });
    }
    for (const { refs, blocks } of written) expectBlocks(await store.readBlocks(refs, 7), blocks);

    // A scattered, reversed selection over every segment, with a duplicate.
    const at = (i: number) => Math.min(i, count - 1);
    const picks: Array<[number, number]> = [
      [3, at(1098)],
      [0, 0],
      [2, at(17)],
      [0, count - 1],
      [1, at(5)],
      [1, at(6)],
      [1, at(4)],
      [2, at(17)],
    ];
    const refs = picks.map(([s, b]) => written[s]!.refs[b]!);
    const got = await store.readBlocks(refs, 7);
    expectBlocks(
      got,
      picks.map(([s, b]) => written[s]!.blocks[b]!),
    );
    expect(got[2] === got[7], 'duplicates get their own copies').toBe(false);
  });

  it("writes from a block source without plaintext checksums and hands blocks over as they arrive (the tiers' way)", async () => {
    const { store } = await freshStore(undefined, { directIo });
    const blocks = blocksOf(count, blockBytes, 9);
    const copied: number[] = [];
    const source = { count, blockBytes, copy: (index: number, target: Uint8Array) => (copied.push(index), target.set(blocks[index]!)) };
    const refs = await store.writeSegment({ tenant: 7, contextId: 'agent-source', version: 1 }, source, { plaintextChecksums: false });
    expect(copied.sort((x, y) => x - y)).toEqual(blocks.map((_, i) => i));
    expect(refs.every((ref) => ref.checksum === undefined)).toBe(true);
    const got = new Array<Uint8Array>(count);
    // Delivered bytes live only during the call (a staging slot for direct I/O): keep copies.
    await store.readBlocks([...refs].reverse(), 7, (position, bytes) => (got[count - 1 - position] = bytes.slice()));
    expectBlocks(got, blocks);
  });
});

describe("crypto in place (the addon's OpenSSL calls) and through Node's API", () => {
  it('write the same files: each reads what the other wrote, with and without plaintext checksums, and refuses a flipped byte', async () => {
    const dir = tempDir('interop');
    dirs.push(dir);
    const ring = ringOf(masterKey('k1'));
    const native = await openStore(dir, ring, { inPlaceCrypto: true });
    const node = await openStore(dir, ring, { inPlaceCrypto: false });
    stores.push(native, node);
    for (const [writer, reader] of [
      [native, node],
      [node, native],
    ] as const) {
      for (const plaintextChecksums of [true, false]) {
        const blocks = blocksOf(5, 8192, plaintextChecksums ? 1 : 2);
        const refs = await writer.writeSegment({ tenant: 1, contextId: 'x', version: 1 }, blocks, { plaintextChecksums });
        expectBlocks(await reader.readBlocks(refs, 1), blocks);
        if (plaintextChecksums)
          await expectCode(
            reader.readBlocks([{ ...refs[2]!, checksum: (refs[2]!.checksum! + 1) >>> 0 }], 1),
            'INTEGRITY',
            /CRC-32 differs/,
          );
        await writer.deleteSegment(refs[0]!.segmentId);
      }
    }
    const refs = await native.writeSegment({ tenant: 1, contextId: 'x', version: 2 }, blocksOf(2, 8192, 3));
    const [file] = filesUnder(dir).filter((name) => name.endsWith('.seg'));
    const bytes = fs.readFileSync(`${dir}/${file}`);
    bytes[bytes.length - 100]! ^= 1;
    fs.writeFileSync(`${dir}/${file}`, bytes);
    for (const reader of [native, node]) await expectCode(reader.readBlocks(refs, 1), 'INTEGRITY', /block 1 failed authentication/);
    await expect(ColdStore.open({ directory: dir, keyRing: ring, inPlaceCrypto: 'yes' as never })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
  });
});

describe('without plaintext checksums', () => {
  it('still refuses a flipped byte (GCM) and never delivers it', async () => {
    const { store, dir } = await freshStore();
    const refs = await store.writeSegment({ tenant: 1, contextId: 'a', version: 1 }, blocksOf(4, 8192, 3), { plaintextChecksums: false });
    const [file] = filesUnder(dir).filter((name) => name.endsWith('.seg'));
    const bytes = fs.readFileSync(`${dir}/${file}`);
    bytes[bytes.length - 5000]! ^= 0x10;
    fs.writeFileSync(`${dir}/${file}`, bytes);
    const delivered: number[] = [];
    await expectCode(
      store.readBlocks(refs, 1, (position) => delivered.push(position)),
      'INTEGRITY',
      /block 3 failed authentication/,
    );
    expect(delivered).not.toContain(3);
  });

  it('refuses a block source that is not one', async () => {
    const { store } = await freshStore();
    await expectCode(
      store.writeSegment({ tenant: 1, contextId: 'a', version: 1 }, { count: 0, blockBytes: 32, copy: () => undefined }),
      'INVALID_ARGUMENT',
      /count/,
    );
    await expectCode(
      store.writeSegment({ tenant: 1, contextId: 'a', version: 1 }, { count: 1 } as never),
      'INVALID_ARGUMENT',
      /block source/,
    );
    await expectCode(
      store.writeSegment({ tenant: 1, contextId: 'a', version: 1 }, blocksOf(1, 32, 1), { plaintextChecksums: 'no' as never }),
      'INVALID_ARGUMENT',
      /plaintextChecksums/,
    );
  });
});

describe('ColdStore', () => {
  it('returns refs that carry the owner, the block index and the plaintext CRC-32', async () => {
    const { store } = await freshStore();
    const blocks = blocksOf(3, 32, 1);
    const refs = await store.writeSegment({ tenant: 1, contextId: 'a', version: 0 }, blocks);
    expect(refs.map((r) => r.index)).toEqual([0, 1, 2]);
    expect(new Set(refs.map((r) => r.segmentId)).size).toBe(1);
    expect(refs[0]!.segmentId).toMatch(/^[0-9a-f]{32}$/);
    const { crc32 } = await import('node:zlib');
    refs.forEach((r, i) => {
      expect(r.owner).toEqual({ tenant: 1, contextId: 'a', version: 0 });
      expect(r.checksum).toBe(crc32(blocks[i]!));
    });
  });

  it('copies blocks at write time: later changes by the caller do not reach the segment', async () => {
    const { store } = await freshStore();
    const blocks = blocksOf(2, 32, 2);
    const expected = blocks.map((b) => b.slice());
    const refs = await store.writeSegment({ tenant: 1, contextId: 'a', version: 1 }, blocks);
    blocks[0]!.fill(0);
    expectBlocks(await store.readBlocks(refs, 1), expected);
  });

  it('writes, reads, lists and deletes manifests; context ids of any characters round-trip through file names', async () => {
    const { store } = await freshStore();
    const ids = ['agent-1', 'Agent-1', 'wf/run:42 ü', '.hidden', '%41'];
    for (const [i, contextId] of ids.entries()) {
      const owner = { tenant: 2, contextId, version: i };
      const refs = await store.writeSegment(owner, blocksOf(2, 32, i));
      await store.writeManifest(manifestOf(owner, refs));
    }
    expect(await store.listManifests()).toEqual([...ids].sort());
    for (const [i, contextId] of ids.entries()) {
      const manifest = await store.readManifest(contextId);
      expect(manifest.contextId).toBe(contextId);
      expect(manifest.version).toBe(i);
      expectBlocks(await store.readBlocks(manifest.pages, 2), blocksOf(2, 32, i));
    }
    expect(await store.hasManifest('Agent-1')).toBe(true);
    await store.deleteManifest('Agent-1');
    await store.deleteManifest('Agent-1'); // already gone: fine
    expect(await store.hasManifest('Agent-1')).toBe(false);
    expect(await store.listManifests()).not.toContain('Agent-1');
    await expectCode(store.readManifest('Agent-1'), 'INTEGRITY', /Agent-1.*missing/);
  });

  it("deletes its own version when the base file's stat changed with no newer write, and leaves nothing", async () => {
    const { store, dir } = await freshStore();
    const v1 = { tenant: 1, contextId: 'a', version: 1 };
    const refs = await store.writeSegment(v1, blocksOf(2, 32, 1));
    await store.writeManifest(manifestOf(v1, refs), { replaces: 'none' });
    await store.writeManifest({ ...manifestOf(v1, refs), version: 2 }, { replaces: 1 });
    // The base's identity (its stat) moves while its bytes stay those of this version.
    const base = `${dir}/manifests/a.manifest`;
    const { atime, mtime } = fs.statSync(base);
    fs.utimesSync(base, atime, new Date(mtime.getTime() - 60_000));
    await store.deleteManifest('a', { version: 2 });
    expect(await store.hasManifest('a')).toBe(false);
    expect(filesUnder(dir).filter((file) => /\.(manifest|rec)$/.test(file))).toEqual([]);
  });

  it('a directory read keeps the identity of the base it read, not of one a compaction replaced while it read', async () => {
    const ring = ringOf(masterKey('k1'));
    const { store: writer, dir } = await freshStore(ring);
    const v1 = { tenant: 1, contextId: 'a', version: 1 };
    const refs = await writer.writeSegment(v1, blocksOf(2, 32, 1));
    await writer.writeManifest(manifestOf(v1, refs), { replaces: 'none' });
    const reader = await openStore(dir, ring);
    stores.push(reader);
    // The reader has statted the base and not read it yet when the writer puts a new base of the same
    // version in its place (a compaction does that).
    const storage = (reader as unknown as { storage: { readManifest: (...args: unknown[]) => Promise<unknown> } }).storage;
    const read = storage.readManifest.bind(storage);
    storage.readManifest = async (...args) => {
      await writer.writeManifest(manifestOf(v1, refs));
      return read(...args);
    };
    expect((await reader.readManifest('a')).version).toBe(1);
    storage.readManifest = read;
    // Its next version chains to the base it read, which is still there: no refusal.
    await reader.writeManifest({ ...manifestOf(v1, refs), version: 2 }, { replaces: 1 });
    expect((await reader.readManifest('a')).version).toBe(2);
  });

  it('replaces a manifest atomically with a newer version', async () => {
    const { store } = await freshStore();
    const v1 = { tenant: 1, contextId: 'a', version: 1 };
    const v2 = { ...v1, version: 2 };
    await store.writeManifest(manifestOf(v1, await store.writeSegment(v1, blocksOf(1, 32, 1))));
    await store.writeManifest(manifestOf(v2, await store.writeSegment(v2, blocksOf(2, 32, 2))));
    const manifest = await store.readManifest('a', { minVersion: 2, expectedTenant: 1 });
    expect(manifest.version).toBe(2);
    expectBlocks(await store.readBlocks(manifest.pages, 1), blocksOf(2, 32, 2));
  });

  it('reports segments no manifest references, and leaves young ones out when asked', async () => {
    const { store } = await freshStore();
    const owner = { tenant: 1, contextId: 'a', version: 1 };
    const kept = await store.writeSegment(owner, blocksOf(2, 32, 1));
    const orphan = await store.writeSegment(owner, blocksOf(2, 32, 2));
    const shared = await store.writeSegment({ ...owner, contextId: 'parent' }, blocksOf(1, 32, 3));
    // A fork's manifest may point into its parent's segment.
    await store.writeManifest(manifestOf(owner, [...kept, ...shared]));
    expect(await store.orphanSegments()).toEqual([orphan[0]!.segmentId]);
    expect(await store.orphanSegments({ minAgeMs: 60_000 })).toEqual([]);
    expect(await store.listSegments()).toEqual([kept[0]!.segmentId, orphan[0]!.segmentId, shared[0]!.segmentId].sort());

    await store.deleteSegment(orphan[0]!.segmentId);
    await store.deleteSegment(orphan[0]!.segmentId); // already gone: fine
    expect(await store.orphanSegments()).toEqual([]);
    await store.deleteManifest('a');
    expect(await store.orphanSegments()).toEqual([kept[0]!.segmentId, shared[0]!.segmentId].sort());
  });

  it('runs many segment writes and reads at once without mixing them up', async () => {
    const { store, dir } = await freshStore();
    const count = 48;
    const written = await Promise.all(
      Array.from({ length: count }, async (_, s) => {
        const blocks = blocksOf(1 + (s % 5), s % 2 === 0 ? 4096 : 96, s);
        const owner = { tenant: 1 + (s % 3), contextId: `ctx-${s}`, version: s };
        const refs = await store.writeSegment(owner, blocks);
        await store.writeManifest(manifestOf(owner, refs, blocks[0]!.length));
        return { owner, blocks };
      }),
    );
    await Promise.all(
      written.map(async ({ owner, blocks }) => {
        const manifest = await store.readManifest(owner.contextId, { expectedTenant: owner.tenant, minVersion: owner.version });
        expectBlocks(await store.readBlocks(manifest.pages, owner.tenant), blocks);
      }),
    );
    expect(await store.listManifests()).toHaveLength(count);
    expect(await store.orphanSegments()).toEqual([]);
    expect(filesUnder(dir).filter((f) => f.includes('.tmp-'))).toEqual([]);
  });

  it("refuses another tenant's blocks and manifest with PERMISSION_DENIED, before any I/O", async () => {
    const { store } = await freshStore();
    const owner = { tenant: 5, contextId: 'a', version: 1 };
    const refs = await store.writeSegment(owner, blocksOf(2, 32, 1));
    await store.writeManifest(manifestOf(owner, refs));
    await expectCode(store.readBlocks(refs, 6), 'PERMISSION_DENIED', /tenant 5, not to tenant 6/);
    await expectCode(store.readManifest('a', { expectedTenant: 6 }), 'PERMISSION_DENIED');
    // A manifest may not point at another tenant's blocks.
    await expectCode(store.writeManifest({ ...manifestOf(owner, refs), tenant: 6 }), 'INVALID_ARGUMENT', /tenant/);
  });

  it('rejects bad arguments with INVALID_ARGUMENT and writes nothing', async () => {
    const { store, dir } = await freshStore();
    const owner = { tenant: 1, contextId: 'a', version: 1 };
    const block = new Uint8Array(32);
    const bad: Array<[string, () => Promise<unknown>]> = [
      ['tenant 0', () => store.writeSegment({ ...owner, tenant: 0 }, [block])],
      ['tenant 2^32', () => store.writeSegment({ ...owner, tenant: 2 ** 32 }, [block])],
      ['empty context id', () => store.writeSegment({ ...owner, contextId: '' }, [block])],
      ['huge context id', () => store.writeSegment({ ...owner, contextId: 'X'.repeat(100) }, [block])],
      ['lone surrogate', () => store.writeSegment({ ...owner, contextId: 'a\ud800' }, [block])],
      ['fractional version', () => store.writeSegment({ ...owner, version: 1.5 }, [block])],
      ['negative version', () => store.writeSegment({ ...owner, version: -1 }, [block])],
      ['no blocks', () => store.writeSegment(owner, [])],
      ['unequal blocks', () => store.writeSegment(owner, [block, new Uint8Array(16)])],
      ['empty block', () => store.writeSegment(owner, [new Uint8Array(0)])],
      ['not a block', () => store.writeSegment(owner, ['abc' as never])],
      ['null owner', () => store.writeSegment(null as never, [block])],
      ['refs not an array', () => store.readBlocks('x' as never, 1)],
      ['bad segment id', () => store.readBlocks([{ segmentId: '../../etc/passwd', index: 0, owner, checksum: 0 }], 1)],
      ['bad index', () => store.readBlocks([{ segmentId: 'a'.repeat(32), index: -1, owner, checksum: 0 }], 1)],
      ['bad checksum', () => store.readBlocks([{ segmentId: 'a'.repeat(32), index: 0, owner, checksum: 2 ** 32 }], 1)],
      ['bad tenant', () => store.readBlocks([], 0)],
      ['bad delete', () => store.deleteSegment('../x')],
      ['manifest page count', () => store.writeManifest({ ...manifestOf(owner, []), tokens: 5 })],
      [
        'manifest layout',
        () => store.writeManifest({ ...manifestOf(owner, []), layout: { bytesPerToken: 8, tokensPerBlock: 4, blockBytes: 33 } }),
      ],
      ['manifest createdAt', () => store.writeManifest({ ...manifestOf(owner, []), createdAt: 5 as never })],
      ['read manifest id', () => store.readManifest(42 as never)],
      ['read manifest minVersion', () => store.readManifest('a', { minVersion: -2 })],
      ['orphan age', () => store.orphanSegments({ minAgeMs: Number.NaN })],
    ];
    for (const [name, call] of bad)
      await expectCode(call(), 'INVALID_ARGUMENT').catch((err: Error) => {
        throw new Error(`${name}: ${err.message}`);
      });
    expect(filesUnder(dir)).toEqual(['manifests', 'segments']);
    await expectCode(ColdStore.open({ directory: dir, keyRing: {} as never }), 'INVALID_ARGUMENT');
    await expectCode(ColdStore.open({ directory: '', keyRing: ringOf(masterKey('k')) }), 'INVALID_ARGUMENT');
    await expectCode(ColdStore.open({ directory: dir, keyRing: ringOf(masterKey('k')), cryptoThreads: 0 }), 'INVALID_ARGUMENT');
  });

  it('reads no refs as no blocks, and a ref past the segment as INTEGRITY', async () => {
    const { store } = await freshStore();
    expect(await store.readBlocks([], 1)).toEqual([]);
    const refs = await store.writeSegment({ tenant: 1, contextId: 'a', version: 1 }, blocksOf(2, 32, 1));
    await expectCode(store.readBlocks([{ ...refs[1]!, index: 2 }], 1), 'INTEGRITY', /context 'a'.*past the segment/);
  });

  it('waits for operations in flight on close, then refuses every call with INVALID_STATE', async () => {
    const { store } = await freshStore();
    const owner = { tenant: 1, contextId: 'a', version: 1 };
    const writing = store.writeSegment(owner, blocksOf(64, 8192, 1));
    await store.close();
    const refs = await writing;
    expect(refs).toHaveLength(64);
    await store.close(); // second close: no-op
    await expectCode(store.readBlocks(refs, 1), 'INVALID_STATE');
    await expectCode(store.writeSegment(owner, blocksOf(1, 32, 1)), 'INVALID_STATE');
    await expectCode(store.listManifests(), 'INVALID_STATE');
    expect(() => store.useKeyRing(ringOf(masterKey('x')))).toThrow(/closed/);
  });

  it('fails the operations of a crypto thread that dies with UNAVAILABLE, and carries on with a new thread', async () => {
    const { store, dir } = await freshStore();
    const owner = { tenant: 1, contextId: 'a', version: 1 };
    const blocks = blocksOf(1024, 64 * 1024, 1); // 64 MiB: still in flight when the thread is killed, even on a loaded machine
    await store.writeSegment(owner, blocks.slice(0, 2));
    const pool = (
      store as unknown as {
        crypto: { threads: Array<{ worker: { terminate(): Promise<number> }; pending: Map<number, unknown> } | undefined> };
      }
    ).crypto;
    // A kill lands mid-job or, rarely, just after the thread's last job answered (the write then
    // finishes on the other threads): try again until one lands mid-job.
    let failure: unknown;
    for (let attempt = 0; attempt < 10 && failure === undefined; attempt++) {
      const writing = store.writeSegment(owner, blocks);
      const deadline = Date.now() + 5000;
      let busy: (typeof pool.threads)[number];
      while ((busy = pool.threads.find((t) => (t?.pending.size ?? 0) > 0)) === undefined && Date.now() < deadline)
        await new Promise((r) => setImmediate(r));
      expect(busy, 'a crypto job in flight').toBeDefined();
      await busy!.worker.terminate();
      failure = await writing.then(
        () => undefined,
        (err: unknown) => err,
      );
    }
    await expectCode(Promise.reject(failure), 'UNAVAILABLE', /crypto thread died/);
    expect(filesUnder(dir).filter((f) => f.includes('.tmp-'))).toEqual([]);
    const refs = await store.writeSegment(owner, blocks);
    expectBlocks(await store.readBlocks(refs, 1), blocks);
  });

  it('never shows key material when inspected or serialised', async () => {
    const key = masterKey('secret-key');
    const ring = ringOf(key);
    const hex = key.key.toString('hex');
    for (const text of [inspect(ring), JSON.stringify(ring), String(ring), inspect(await freshStore(ring))]) {
      expect(text).not.toContain(hex);
      expect(text).not.toContain(key.key.toString('base64'));
    }
    expect(inspect(ring)).toContain('secret-key');
  });
});
