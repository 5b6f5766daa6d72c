// The cold tier through the storage seam, on the POSIX blob store (the S3 backend's runs are in
// test/tiers/cold-tier-s3.test.ts): blocks read back byte-exact from segments of any size, manifest writes
// fenced by their condition (create-only for a context's first, the version the writer read for the next),
// orphan segments aged by when this process first saw them, and two tiers sharing nothing but the store.
import { promises as fsp } from 'node:fs';

import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { isPreconditionFailed } from '../../../src/blob-store/blob-errors';
import type { BlobStore } from '../../../src/blob-store/blob-store';
import { PosixBlobStore } from '../../../src/blob-store/posix/posix-blob-store';
import { ColdStore } from '../../../src/tiers/cold';
import { manifestKey, segmentKey } from '../../../src/tiers/cold/cold-blob-keys';
import { expectSameBytes, tokenBytes } from '../../fabric/implementations';
import { openSharedTierWorker, type SharedTierWorker } from '../fixtures/shared-tier';
import { blocksOf, expectBlocks, expectCode, manifestOf, masterKey, ringOf, tempDir } from './helpers';

const key = masterKey('k1');
let root: string;
let store: PosixBlobStore;
const closing: { close(): Promise<void> }[] = [];

beforeEach(async () => {
  root = tempDir('blob');
  store = await PosixBlobStore.open(root);
});
afterEach(async () => {
  for (const open of closing.splice(0)) await open.close();
  await store.close();
  await fsp.rm(root, { recursive: true, force: true });
});

async function openCold(): Promise<ColdStore> {
  const cold = await ColdStore.open({ store, keyRing: ringOf(key), cryptoThreads: 1 });
  closing.push(cold);
  return cold;
}

async function openWorker(): Promise<SharedTierWorker> {
  const worker = await openSharedTierWorker(store, key.key);
  closing.push(worker);
  return worker;
}

describe('the cold tier in a blob store', () => {
  it('reads back every byte of blocks across segments, in any order, from ranges of each', async () => {
    const cold = await openCold();
    const owner = { tenant: 1, contextId: 'Ctx/é', version: 1 };
    const small = blocksOf(9, 4096, 1);
    const big = blocksOf(3, 5 * 1024 * 1024, 2); // runs bigger than one staging slot
    const refs = [...(await cold.writeSegment(owner, small)), ...(await cold.writeSegment(owner, big))];
    expect((await store.list('cold/segments/')).map((head) => head.key).sort()).toEqual(
      [...new Set(refs.map((ref) => segmentKey(ref.segmentId)))].sort(),
    );
    const order = [10, 0, 8, 3, 11, 4, 9, 1];
    expectBlocks(
      await cold.readBlocks(
        order.map((i) => refs[i]!),
        1,
      ),
      order.map((i) => [...small, ...big][i]!),
    );
  });

  it('keeps at most its read limit of run reads in flight, and reads no further run once one fails to verify', async () => {
    const cold = await openCold(); // one crypto thread: 3 run reads at once
    const owner = { tenant: 1, contextId: 'runs', version: 1 };
    const blockBytes = 512 * 1024; // 8 blocks, 4 MiB, per run
    const blocks = blocksOf(64, blockBytes, 3);
    const refs = await cold.writeSegment(owner, blocks);
    let inFlight = 0;
    let most = 0;
    let runReads = 0;
    const get = store.get.bind(store);
    store.get = async (key, range) => {
      if (range !== undefined && range.length >= blockBytes) runReads++;
      most = Math.max(most, ++inFlight);
      try {
        await new Promise((resolve) => setTimeout(resolve, 25));
        return await get(key, range);
      } finally {
        inFlight--;
      }
    };
    expectBlocks(await cold.readBlocks(refs, 1), blocks);
    expect(runReads).toBe(8);
    expect(most).toBe(3);
    // A byte of the first block flipped: the run fails authentication, and runs not yet read are skipped.
    const segment = segmentKey(refs[0]!.segmentId);
    const stored = (await get(segment))!.bytes;
    stored[stored.length - blocks.length * blockBytes + 100]! ^= 1;
    await store.put(segment, stored);
    runReads = 0;
    await expectCode(cold.readBlocks(refs, 1), 'INTEGRITY', /block 0 failed authentication/);
    expect(runReads).toBeLessThan(8);
  });

  it("writes a context's first manifest only where there is none, and the next only over the version read", async () => {
    const writer = await openCold();
    const refs = await writer.writeSegment({ tenant: 1, contextId: 'a', version: 1 }, blocksOf(2, 32, 1));
    const v1 = { ...manifestOf({ tenant: 1, contextId: 'a', version: 1 }, refs) };
    await writer.writeManifest(v1, { replaces: 'none' });
    await expect(writer.writeManifest(v1, { replaces: 'none' })).rejects.toSatisfy(isPreconditionFailed);

    // Another process takes the context over: it reads version 1 and writes version 2 over it.
    const taker = await openCold();
    expect((await taker.readManifest('a')).version).toBe(1);
    await taker.writeManifest({ ...v1, version: 2 }, { replaces: 1 });
    // The first writer, fenced off but unaware, writes its own version 2: refused by the store.
    const late = await expectCode(writer.writeManifest({ ...v1, version: 2, createdAt: 'late' }, { replaces: 1 }), 'STALE_HANDLE');
    expect(isPreconditionFailed(late)).toBe(true);
    expect((await taker.readManifest('a')).createdAt).toBe(v1.createdAt);
    // A process that never saw the manifest checks the version it names against the stored one.
    const third = await openCold();
    await expect(third.writeManifest({ ...v1, version: 3 }, { replaces: 1 })).rejects.toSatisfy(isPreconditionFailed);
    await third.writeManifest({ ...v1, version: 3 }, { replaces: 2 });
    expect(await third.listManifests()).toEqual(['a']);
    expect(await store.head(manifestKey('a'))).toBeDefined();
  });

  it('deletes a damaged manifest only while its base is the one found damaged, and never one that verifies', async () => {
    const writer = await openCold();
    const owner = { tenant: 1, contextId: 'a', version: 1 };
    const refs = await writer.writeSegment(owner, blocksOf(2, 32, 1));
    await writer.writeManifest(manifestOf(owner, refs), { replaces: 'none' });
    await writer.writeManifest({ ...manifestOf(owner, refs), version: 2 }, { replaces: 1 }); // a log record after the base
    await expectCode(writer.deleteDamagedManifest('a'), 'INVALID_STATE', /verifies/);
    const base = (await store.get(manifestKey('a')))!.bytes;
    await store.put(manifestKey('a'), Buffer.from('not a manifest'));

    // Its holder puts the base back between the discarding worker's read and its delete.
    let restored = false;
    const racing: BlobStore = {
      location: store.location,
      put: (key, bytes, condition) => store.put(key, bytes, condition),
      get: (key, range) => store.get(key, range),
      head: (key) => store.head(key),
      list: (prefix) => store.list(prefix),
      delete: async (key, condition) => {
        if (key === manifestKey('a') && !restored) {
          restored = true;
          await store.put(key, base);
        }
        return store.delete(key, condition);
      },
      close: async () => undefined,
    };
    const discarding = await ColdStore.open({ store: racing, keyRing: ringOf(key), cryptoThreads: 1 });
    closing.push(discarding);
    await expectCode(discarding.deleteDamagedManifest('a'), 'STALE_HANDLE');
    expect((await (await openCold()).readManifest('a')).version).toBe(2);

    // Damaged and left so: its base and its records go, and the segments stay for the sweep.
    await store.put(manifestKey('a'), Buffer.from('not a manifest'));
    await discarding.deleteDamagedManifest('a');
    expect((await store.list('cold/')).map((head) => head.key)).toEqual([segmentKey(refs[0]!.segmentId)]);
    await discarding.deleteDamagedManifest('a'); // nothing left: nothing to do
  });

  it('reports an orphan segment only once this process has seen it for minAgeMs', async () => {
    const cold = await openCold();
    const [ref] = await cold.writeSegment({ tenant: 1, contextId: 'a', version: 1 }, blocksOf(1, 32, 1));
    expect(await cold.orphanSegments()).toEqual([ref!.segmentId]);
    expect(await cold.orphanSegments({ minAgeMs: 150 })).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await cold.orphanSegments({ minAgeMs: 150 })).toEqual([ref!.segmentId]);
    await cold.deleteSegment(ref!.segmentId);
    expect(await cold.listSegments()).toEqual([]);
  });

  it('moves a context between two tiers that share only the store, and drops the late copy of the one fenced off', async () => {
    const first = await openWorker();
    first.memory.create('agent', 7);
    await first.memory.append('agent', tokenBytes(13, 5));
    await first.memory.demote('agent', 'disk');

    const second = await openWorker();
    await second.memory.recover('agent', { expectedTenant: 7, minVersion: first.memory.durableVersion('agent') });
    await second.memory.promote('agent');
    expectSameBytes(await second.memory.read('agent', 0, 13), tokenBytes(13, 5));
    await second.memory.append('agent', tokenBytes(3, 6));
    await second.memory.spill('agent');

    // The first still holds its copy and writes it again: the store refuses, the tier drops the copy.
    await first.memory.append('agent', tokenBytes(1, 9));
    await expectCode(first.memory.spill('agent'), 'STALE_HANDLE', /adopted by another worker/);
    expect(first.memory.has('agent')).toBe(false);
    expect((await second.cold.readManifest('agent')).tokens).toBe(16);
  });

  it('takes a directory or a store, not both or neither', async () => {
    await expectCode(ColdStore.open({ keyRing: ringOf(key) }), 'INVALID_ARGUMENT', /directory or a blob store/);
    await expectCode(ColdStore.open({ directory: root, store, keyRing: ringOf(key) }), 'INVALID_ARGUMENT', /not both/);
    await expectCode(ColdStore.open({ store: { put: 1 } as never, keyRing: ringOf(key) }), 'INVALID_ARGUMENT', /BlobStore/);
  });
});
