// The BlobStore contract, one suite for every backend: the POSIX directory (posix-blob-store.test.ts) and
// S3 on a real SeaweedFS server (s3-blob-store.test.ts) must answer every call the same way, refusals
// and typed errors included, so the tiers above the seam never learn which one they run on.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { isPreconditionFailed } from '../../src/blob-store/blob-errors';
import type { BlobStore } from '../../src/blob-store/blob-store';
import { readBounded } from '../../src/blob-store/bounded-read';
import { readRangeInto, readStartInto } from '../../src/blob-store/ranged-read-into';
import { isFabricError } from '../../src/fabric/errors';

/** What a backend's test gives the suite: a fresh, empty store per call, and how many property runs it affords. */
export interface ContractBackend {
  open(): Promise<BlobStore>;
  propertyRuns: number;
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'resolved';
  } catch (err) {
    if (isPreconditionFailed(err)) return 'PRECONDITION_FAILED';
    return isFabricError(err) ? err.code : `untyped: ${String(err)}`;
  }
}

const text = (value: string) => Buffer.from(value);

export function blobStoreContract(name: string, backend: ContractBackend): void {
  describe(`BlobStore contract: ${name}`, () => {
    it('puts and gets a blob with its version, heads it, and answers undefined for a missing key', async () => {
      const store = await backend.open();
      const version = await store.put('a/b/c', text('hello'));
      const read = await store.get('a/b/c');
      expect(read?.bytes.toString()).toBe('hello');
      expect(read?.version).toBe(version);
      expect(read?.size).toBe(5);
      expect(await store.head('a/b/c')).toEqual({ key: 'a/b/c', size: 5, version });
      expect(await store.get('a/b/missing')).toBeUndefined();
      expect(await store.head('nothing/here')).toBeUndefined();
      const empty = await store.put('empty', new Uint8Array(0));
      expect(await store.get('empty')).toMatchObject({ size: 0, version: empty });
      expect((await store.get('empty'))?.bytes.byteLength).toBe(0);
      await store.close();
    });

    it('creates only when absent with ifNoneMatch, and leaves the first write in place', async () => {
      const store = await backend.open();
      const first = await store.put('records/once', text('first'), { ifNoneMatch: '*' });
      expect(await codeOf(store.put('records/once', text('second'), { ifNoneMatch: '*' }))).toBe('PRECONDITION_FAILED');
      const read = await store.get('records/once');
      expect(read?.bytes.toString()).toBe('first');
      expect(read?.version).toBe(first);
      await store.close();
    });

    it('replaces only the version read with ifMatch: a stale or absent version is refused', async () => {
      const store = await backend.open();
      const v1 = await store.put('m/manifest', text('one'));
      const v2 = await store.put('m/manifest', text('two'), { ifMatch: v1 });
      expect(v2).not.toBe(v1);
      expect(await codeOf(store.put('m/manifest', text('late'), { ifMatch: v1 }))).toBe('PRECONDITION_FAILED');
      expect((await store.get('m/manifest'))?.bytes.toString()).toBe('two');
      expect(await codeOf(store.put('m/absent', text('x'), { ifMatch: v2 }))).toBe('PRECONDITION_FAILED');
      expect(await store.head('m/absent')).toBeUndefined();
      const v3 = await store.put('m/manifest', text('three'));
      expect((await store.get('m/manifest'))?.version).toBe(v3);
      await store.close();
    });

    it('reads byte ranges inside the blob, and refuses one past its end', async () => {
      const store = await backend.open();
      const bytes = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 251));
      const version = await store.put('seg/1', bytes);
      const part = await store.get('seg/1', { offset: 100, length: 300 });
      expect(part?.bytes.equals(bytes.subarray(100, 400))).toBe(true);
      expect(part?.size).toBe(1000);
      expect(part?.version).toBe(version);
      expect((await store.get('seg/1', { offset: 999, length: 1 }))?.bytes[0]).toBe(bytes[999]);
      expect(await codeOf(store.get('seg/1', { offset: 900, length: 200 }))).toBe('OUT_OF_RANGE');
      expect(await codeOf(store.get('seg/1', { offset: 1000, length: 1 }))).toBe('OUT_OF_RANGE');
      expect(await store.get('seg/none', { offset: 0, length: 1 })).toBeUndefined();
      await store.close();
    });

    it('reads a range into memory the caller gives (getInto where the store has it), as get() reads it', async () => {
      const store = await backend.open();
      const bytes = Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 7) % 253));
      const version = await store.put('seg/into', bytes);
      // A view into a larger shared region, as the cold tier's staging slots are.
      const region = new Uint8Array(new SharedArrayBuffer(4096));
      const into = region.subarray(512, 512 + 2000);
      expect(await readRangeInto(store, 'seg/into', 600, into)).toEqual({ key: 'seg/into', size: 3000, version });
      expect(Buffer.from(into).equals(bytes.subarray(600, 2600))).toBe(true);
      expect(region.subarray(0, 512).every((byte) => byte === 0) && region.subarray(2512).every((byte) => byte === 0)).toBe(true);
      expect(await codeOf(readRangeInto(store, 'seg/into', 2000, new Uint8Array(1001)))).toBe('OUT_OF_RANGE');
      expect(await codeOf(readRangeInto(store, 'seg/into', 3000, new Uint8Array(1)))).toBe('OUT_OF_RANGE');
      expect(await readRangeInto(store, 'seg/none', 0, new Uint8Array(1))).toBeUndefined();
      expect(await codeOf(readRangeInto(store, 'seg/into', 0, new Uint8Array(0)))).toBe('INVALID_ARGUMENT');
      await store.close();
    });

    it("reads a blob's first bytes with its size and version in one call (readStartInto), clipped to the blob", async () => {
      const store = await backend.open();
      const bytes = Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 11) % 251));
      const version = await store.put('seg/start', bytes);
      const into = new Uint8Array(1000);
      expect(await readStartInto(store, 'seg/start', into)).toEqual({ head: { key: 'seg/start', size: 3000, version }, bytes: 1000 });
      expect(Buffer.from(into).equals(bytes.subarray(0, 1000))).toBe(true);
      // Larger than the blob: the blob whole, the rest of the memory untouched.
      const roomy = new Uint8Array(4000).fill(0xee);
      expect(await readStartInto(store, 'seg/start', roomy)).toEqual({ head: { key: 'seg/start', size: 3000, version }, bytes: 3000 });
      expect(Buffer.from(roomy.subarray(0, 3000)).equals(bytes) && roomy.subarray(3000).every((byte) => byte === 0xee)).toBe(true);
      const emptyVersion = await store.put('seg/empty', new Uint8Array(0));
      expect(await readStartInto(store, 'seg/empty', new Uint8Array(16))).toEqual({
        head: { key: 'seg/empty', size: 0, version: emptyVersion },
        bytes: 0,
      });
      expect(await readStartInto(store, 'seg/none', new Uint8Array(16))).toBeUndefined();
      expect(await codeOf(readStartInto(store, 'seg/start', new Uint8Array(0)))).toBe('INVALID_ARGUMENT');
      await store.close();
    });

    it('reads a small blob whole with a cap (readBounded): in the first read, past it, and refused above the cap', async () => {
      const store = await backend.open();
      const small = Buffer.from('a manifest');
      const smallVersion = await store.put('rec/small', small);
      expect(await readBounded(store, 'rec/small', 1024, 'record')).toEqual({
        key: 'rec/small',
        size: small.length,
        version: smallVersion,
        bytes: small,
      });
      // Past the first read (256 KiB): the rest in a second.
      const big = Buffer.from(Array.from({ length: 300 * 1024 }, (_, i) => (i * 13) % 241));
      const bigVersion = await store.put('rec/big', big);
      const read = await readBounded(store, 'rec/big', 1024 * 1024, 'record');
      expect(read?.version).toBe(bigVersion);
      expect(read?.bytes.equals(big)).toBe(true);
      await expect(readBounded(store, 'rec/big', 200 * 1024, 'record')).rejects.toMatchObject({
        code: 'INTEGRITY',
        message: expect.stringContaining('record is implausibly large (307200 bytes'),
      });
      expect(await readBounded(store, 'rec/none', 1024, 'record')).toBeUndefined();
      await store.close();
    });

    it('lists by plain string prefix, in key order, with the versions head gives', async () => {
      const store = await backend.open();
      const keys = ['t/a/2', 't/a/1', 't/ab', 't/b/1', 'u/1'];
      for (const key of keys) await store.put(key, text(key));
      expect((await store.list('t/a')).map((head) => head.key)).toEqual(['t/a/1', 't/a/2', 't/ab']);
      expect((await store.list('t/a/')).map((head) => head.key)).toEqual(['t/a/1', 't/a/2']);
      expect((await store.list('')).map((head) => head.key)).toEqual([...keys].sort());
      expect(await store.list('v/')).toEqual([]);
      const listed = await store.list('u/');
      expect(listed).toEqual([await store.head('u/1')]);
      await store.close();
    });

    it('deletes: true once, false after, and with ifMatch only that version', async () => {
      const store = await backend.open();
      const v1 = await store.put('d/x', text('one'));
      const v2 = await store.put('d/x', text('two'));
      expect(await codeOf(store.delete('d/x', { ifMatch: v1 }))).toBe('PRECONDITION_FAILED');
      expect((await store.get('d/x'))?.bytes.toString()).toBe('two');
      expect(await store.delete('d/x', { ifMatch: v2 })).toBe(true);
      expect(await store.head('d/x')).toBeUndefined();
      expect(await codeOf(store.delete('d/x', { ifMatch: v2 }))).toBe('PRECONDITION_FAILED');
      await store.put('d/y', text('y'));
      expect(await store.delete('d/y')).toBe(true);
      expect(await store.delete('d/y')).toBe(false);
      // Gone means gone: a create-once succeeds again.
      await store.put('d/y', text('again'), { ifNoneMatch: '*' });
      expect((await store.get('d/y'))?.bytes.toString()).toBe('again');
      await store.close();
    });

    it('refuses bad keys, prefixes, bytes, ranges and conditions with INVALID_ARGUMENT, touching nothing', async () => {
      const store = await backend.open();
      const badKeys: unknown[] = [
        '',
        '/abs',
        'a//b',
        'a/',
        '../up',
        'a/../b',
        '.hidden',
        'a/.claim',
        'sp ace',
        'ü',
        'x'.repeat(1025),
        7,
        null,
      ];
      for (const key of badKeys) {
        expect(await codeOf(store.put(key as string, text('x'))), String(key)).toBe('INVALID_ARGUMENT');
        expect(await codeOf(store.get(key as string)), String(key)).toBe('INVALID_ARGUMENT');
        expect(await codeOf(store.head(key as string)), String(key)).toBe('INVALID_ARGUMENT');
        expect(await codeOf(store.delete(key as string)), String(key)).toBe('INVALID_ARGUMENT');
      }
      expect(await codeOf(store.list('../'))).toBe('INVALID_ARGUMENT');
      expect(await codeOf(store.put('ok', 'text' as unknown as Uint8Array))).toBe('INVALID_ARGUMENT');
      for (const range of [{ offset: -1, length: 1 }, { offset: 0, length: 0 }, { offset: 0.5, length: 2 }, {}]) {
        expect(await codeOf(store.get('ok', range as never)), JSON.stringify(range)).toBe('INVALID_ARGUMENT');
      }
      for (const condition of [{ ifNoneMatch: 'x' }, { ifMatch: '' }, { ifMatch: 'a', ifNoneMatch: '*' }, { ifMatch: 'new\nline' }, {}]) {
        expect(await codeOf(store.put('ok', text('x'), condition as never)), JSON.stringify(condition)).toBe('INVALID_ARGUMENT');
      }
      expect(await store.list('')).toEqual([]);
      await store.close();
    });

    it('keeps any bytes under any well-formed key, and refuses any key with a character outside the alphabet', async () => {
      const store = await backend.open();
      const segment = fc.stringMatching(/^[A-Za-z0-9_-][A-Za-z0-9._-]{0,20}$/);
      await fc.assert(
        fc.asyncProperty(fc.array(segment, { minLength: 1, maxLength: 4 }), fc.uint8Array({ maxLength: 2048 }), async (segments, bytes) => {
          // Distinct per run, so a key is never another's folder.
          const key = `p/${segments.join('-')}/${segments.length}`;
          const version = await store.put(key, bytes);
          const read = await store.get(key);
          expect(read?.version).toBe(version);
          expect(Buffer.compare(read!.bytes, Buffer.from(bytes))).toBe(0);
        }),
        { numRuns: backend.propertyRuns },
      );
      await fc.assert(
        fc.asyncProperty(
          fc.string({ minLength: 1, maxLength: 30 }).filter((key) => /[^A-Za-z0-9._/-]/.test(key)),
          async (key) => {
            expect(await codeOf(store.put(key, text('x')))).toBe('INVALID_ARGUMENT');
          },
        ),
        { numRuns: backend.propertyRuns },
      );
      await store.close();
    });
  });
}
