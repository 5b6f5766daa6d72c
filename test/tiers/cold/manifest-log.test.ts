// The manifest log (src/tiers/cold/manifest-log.ts): a hot turn's durable copy writes what the turn added,
// not the context, in a directory and in a blob store; the log is compacted into a new base and read back
// the same by a fresh process; and every write stays fenced: of writers racing for the next version exactly
// one wins, a late writer whose record number a compaction freed is refused, and a stale holder's delete
// of a context another worker took over is refused. The S3 runs are in
// test/tiers/manifest-log-s3.test.ts, the attacks on the log in test/security/attacks/cold-tier-manifest-log.test.ts.
import { promises as fsp } from 'node:fs';
import path from 'node:path';

import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { PosixBlobStore } from '../../../src/blob-store/posix/posix-blob-store';
import { ColdStore } from '../../../src/tiers/cold';
import { contextKeyPath, MANIFEST_LOG_PREFIX } from '../../../src/tiers/cold/cold-blob-keys';
import { tinyShape } from '../../fabric/implementations';
import { CountingBlobStore } from '../fixtures/counting-blob-store';
import { blobWrites, directoryWrites, hotTurnBytes, type Written } from '../fixtures/hot-turns';
import { staleDeleteIsRefused, writeHeldDeleteOut } from '../fixtures/stale-delete';
import { blocksOf, expectCode, manifestOf, masterKey, ringOf, tempDir } from './helpers';

const key = masterKey('k1');
let root: string;
const closing: { close(): Promise<void> }[] = [];

beforeEach(() => {
  root = tempDir('manifest-log');
});
afterEach(async () => {
  for (const open of closing.splice(0).reverse()) await open.close();
  await fsp.rm(root, { recursive: true, force: true });
});

async function track<T extends { close(): Promise<void> }>(opened: Promise<T>): Promise<T> {
  const value = await opened;
  closing.push(value);
  return value;
}

interface Backend {
  name: string;
  /** A cold store and its byte counter. */
  open(): Promise<{ cold: ColdStore; written: () => Promise<Written> }>;
}

const backends: Backend[] = [
  {
    name: 'a directory',
    async open() {
      const dir = path.join(root, `cold-${closing.length}`);
      const cold = await track(ColdStore.open({ directory: dir, keyRing: ringOf(key), cryptoThreads: 1 }));
      return { cold, written: directoryWrites(dir) };
    },
  },
  {
    name: 'a POSIX blob store',
    async open() {
      const counting = new CountingBlobStore(await track(PosixBlobStore.open(path.join(root, `blob-${closing.length}`))));
      const cold = await track(ColdStore.open({ store: counting, keyRing: ringOf(key), cryptoThreads: 1 }));
      return { cold, written: blobWrites(counting) };
    },
  },
];

describe.each(backends)('the manifest log in $name', (backend) => {
  it('a hot turn writes what it added: about the same bytes at 8k tokens of context as at 512', async () => {
    const perTurn: Record<number, Written> = {};
    for (const contextTokens of [512, 8192]) {
      const { cold, written } = await backend.open();
      perTurn[contextTokens] = await hotTurnBytes({ cold, written, shape: tinyShape, contextTokens, turns: 12, turnTokens: 32 });
    }
    const [small, large] = [perTurn[512]!, perTurn[8192]!];
    // A whole manifest of 8k tokens (512 page refs, 8192 token ids) is over 60 KB: a turn writes far less.
    expect(large.metadata).toBeLessThan(3_000);
    expect(large.total / small.total).toBeLessThanOrEqual(1.25);
    expect(large.metadata / small.metadata).toBeLessThanOrEqual(1.25);
  });
});

/** Cold stores of several processes on one storage. */
const sharedStorages: Array<{ name: string; opener: () => Promise<() => Promise<ColdStore>> }> = [
  {
    name: 'a directory',
    opener: async () => () => track(ColdStore.open({ directory: path.join(root, 'shared'), keyRing: ringOf(key), cryptoThreads: 1 })),
  },
  {
    name: 'a POSIX blob store',
    opener: async () => {
      const store = await track(PosixBlobStore.open(path.join(root, 'shared')));
      return () => track(ColdStore.open({ store, keyRing: ringOf(key), cryptoThreads: 1 }));
    },
  },
];

describe.each(sharedStorages)("a stale holder's delete in $name", ({ opener }) => {
  it('is refused once another worker wrote the context; of a delete and a write racing, exactly one happens', async () => {
    await staleDeleteIsRefused(await opener());
  });
});

describe('the manifest log in a blob store', () => {
  async function openBlob(): Promise<{ store: CountingBlobStore; open: () => Promise<ColdStore> }> {
    const store = new CountingBlobStore(await track(PosixBlobStore.open(path.join(root, 'blob'))));
    return { store, open: () => track(ColdStore.open({ store, keyRing: ringOf(key), cryptoThreads: 1 })) };
  }
  const recordsOf = async (store: CountingBlobStore, contextId: string) =>
    (await store.list(`${MANIFEST_LOG_PREFIX}${contextKeyPath(contextId)}/`)).length;

  it('compacts the log into a new base, removes the records it replaces, and a fresh process reads the same manifest', async () => {
    const { store, open } = await openBlob();
    const writer = await open();
    const turns = 40;
    const refs = await writer.writeSegment({ tenant: 1, contextId: 'c', version: 1 }, blocksOf(2, 32, 1));
    const first = manifestOf({ tenant: 1, contextId: 'c', version: 1 }, refs);
    await writer.writeManifest(first, { replaces: 'none' });
    store.reset();
    let manifest = first;
    for (let version = 2; version <= turns; version++) {
      const more = await writer.writeSegment({ tenant: 1, contextId: 'c', version }, blocksOf(1, 32, version));
      manifest = { ...manifest, version, pages: [...manifest.pages, ...more], pageChecksums: [...manifest.pageChecksums, version] };
      manifest.tokens = manifest.pages.length * 4;
      await writer.writeManifest(manifest, { replaces: version - 1 });
    }
    // Bases were written along the way (compactions), and the records before the last one are gone.
    expect(store.bytes('cold/manifests')).toBeGreaterThan(0);
    expect(store.bytes('cold/manifest-log')).toBeGreaterThan(0);
    expect(await recordsOf(store, 'c')).toBeLessThan(turns - 1);
    const fresh = await open();
    expect(await fresh.readManifest('c', { minVersion: turns })).toEqual(await writer.readManifest('c'));
    expect(await fresh.readManifest('c')).toEqual(manifest);
    // The fresh process continues the log where it is.
    await fresh.writeManifest({ ...manifest, version: turns + 1, createdAt: 'next' }, { replaces: turns });
    expect((await (await open()).readManifest('c')).createdAt).toBe('next');
  });

  it('of writers racing for the next version exactly one wins; the others are STALE_HANDLE', async () => {
    const { open } = await openBlob();
    const writer = await open();
    const refs = await writer.writeSegment({ tenant: 1, contextId: 'r', version: 1 }, blocksOf(2, 32, 1));
    const v1 = manifestOf({ tenant: 1, contextId: 'r', version: 1 }, refs);
    await writer.writeManifest(v1, { replaces: 'none' });
    const racers = await Promise.all(Array.from({ length: 8 }, () => open()));
    for (const racer of racers) expect((await racer.readManifest('r')).version).toBe(1);
    const outcomes = await Promise.allSettled(
      racers.map((racer, i) => racer.writeManifest({ ...v1, version: 2, createdAt: `racer ${i}` }, { replaces: 1 })),
    );
    const winners = outcomes.flatMap((outcome, i) => (outcome.status === 'fulfilled' ? [i] : []));
    expect(winners).toHaveLength(1);
    for (const outcome of outcomes) if (outcome.status === 'rejected') expect(outcome.reason.code).toBe('STALE_HANDLE');
    expect((await (await open()).readManifest('r')).createdAt).toBe(`racer ${winners[0]}`);
  });

  it('of a delete paused before it removes the base and a write meanwhile, exactly one happens', async () => {
    const store = await track(PosixBlobStore.open(path.join(root, 'paused')));
    await writeHeldDeleteOut(store, (on) => track(ColdStore.open({ store: on, keyRing: ringOf(key), cryptoThreads: 1 })));
  });

  it("refuses a late writer whose record number a newer holder's compaction freed", async () => {
    const { store, open } = await openBlob();
    const late = await open();
    const refs = await late.writeSegment({ tenant: 1, contextId: 'f', version: 1 }, blocksOf(4, 32, 1));
    const v1 = manifestOf({ tenant: 1, contextId: 'f', version: 1 }, refs);
    await late.writeManifest(v1, { replaces: 'none' });
    // A newer holder takes over and writes versions 2 and 3, each changing every page: records as big as
    // the base, so the log is compacted and record 2 removed.
    const holder = await open();
    expect((await holder.readManifest('f')).version).toBe(1);
    for (const version of [2, 3]) {
      const pages = await holder.writeSegment({ tenant: 1, contextId: 'f', version }, blocksOf(4, 32, version));
      await holder.writeManifest({ ...v1, version, pages }, { replaces: version - 1 });
    }
    const record2 = `${MANIFEST_LOG_PREFIX}${contextKeyPath('f')}/${'2'.padStart(16, '0')}.rec`;
    expect(await store.head(record2)).toBeUndefined();
    // The fenced-off holder writes its version 2: the number is free, but its base is gone.
    await expectCode(late.writeManifest({ ...v1, version: 2, createdAt: 'late' }, { replaces: 1 }), 'STALE_HANDLE', /base was replaced/);
    const read = await (await open()).readManifest('f', { minVersion: 3 });
    expect(read.version).toBe(3);
    expect(read.createdAt).toBe(v1.createdAt);
  });
});
