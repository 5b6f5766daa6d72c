// A fuzz run of the addon's whole API: random and malformed arguments, stale and foreign handles, huge
// sizes, open leases, and async calls left in flight while others run. Every failure must be a
// FabricError, the process must survive, and releasing everything must bring the pool back to baseline.
// KVFABRIC_FUZZ_CALLS sets the count (the ASan run in CI uses 100,000).
import { describe, expect, it } from 'vitest';

import { FabricError, NativeAllocator } from '../../src/fabric';
import { tinyShape } from './implementations';

const CALLS = Number(process.env.KVFABRIC_FUZZ_CALLS ?? 20_000);

/** A small deterministic PRNG (mulberry32) so a failing seed can be replayed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('native addon fuzz', () => {
  it(`survives ${CALLS} random calls with typed errors only and returns to baseline`, async () => {
    const seed = Number(process.env.KVFABRIC_FUZZ_SEED ?? Date.now() % 1e9);
    const random = prng(seed);
    const int = (n: number) => Math.floor(random() * n);
    const allocator = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 64, hostBlockCount: 32 });
    // The allocator is the addon's pool: call it as plain JS would, with anything.
    const pool = allocator as unknown as Record<string, (...args: unknown[]) => unknown>;
    const bpt = allocator.layout.bytesPerToken;

    const contexts: number[] = [];
    const released: number[] = [];
    const leases: number[] = [];
    const rawBatches: Float64Array[] = [];
    const inFlight: Array<Promise<unknown>> = [];
    const failures = new Map<string, number>();

    const garbage = (): unknown =>
      [
        undefined,
        null,
        -1,
        0.5,
        Number.NaN,
        Infinity,
        2 ** 53,
        2 ** 64,
        'x',
        {},
        [],
        Symbol('s'),
        1n,
        new Uint8Array(3),
        new Float64Array([0.5, -1]),
      ][int(15)];
    const handle = (): unknown => {
      const r = random();
      if (r < 0.6 && contexts.length) return contexts[int(contexts.length)];
      if (r < 0.75 && released.length) return released[int(released.length)];
      if (r < 0.85) return int(2 ** 32) + 2 ** 32 * int(8);
      return garbage();
    };
    const count = (): unknown => (random() < 0.85 ? int(40) : [2 ** 31, 2 ** 40, -5, 1.5][int(4)]);
    const bytes = (): unknown => {
      const r = random();
      if (r < 0.7) return new Uint8Array(int(12) * bpt).fill(1 + int(250));
      if (r < 0.85) return new Uint8Array(int(3 * bpt) + 1);
      return garbage();
    };
    const lease = (): unknown => (random() < 0.8 && leases.length ? leases[int(leases.length)] : random() < 0.5 ? int(1000) : garbage());
    const keys = (): unknown => (random() < 0.7 ? Float64Array.from({ length: int(6) }, () => 1 + int(1000)) : garbage());

    const calls: Array<[string, () => unknown[]]> = [
      ['createContext', () => [random() < 0.9 ? 1 + int(3) : garbage()]],
      ['append', () => [handle(), bytes()]],
      ['appendAsync', () => [handle(), bytes()]],
      ['read', () => [handle(), count(), count()]],
      ['readAsync', () => [handle(), count(), count()]],
      ['readBlock', () => [handle(), count()]],
      ['fork', () => [handle()]],
      ['forkPrefix', () => [handle(), random() < 0.8 ? int(4) : count()]],
      ['pin', () => [handle()]],
      ['unpin', () => [handle()]],
      ['release', () => [handle()]],
      ['blockTable', () => [handle()]],
      ['contextStats', () => [handle()]],
      ['stats', () => []],
      ['allocateBlocks', () => [random() < 0.9 ? 1 + int(3) : garbage(), count()]],
      ['freeBlocks', () => [random() < 0.7 && rawBatches.length ? rawBatches[int(rawBatches.length)] : garbage()]],
      ['demote', () => [handle()]],
      ['promote', () => [handle()]],
      ['beginSpill', () => [handle()]],
      ['spillRead', () => [lease(), count()]],
      ['commitSpill', () => [lease(), keys(), random() < 0.5]],
      ['beginFill', () => [handle(), random() < 0.8 ? (random() < 0.5 ? 'host' : 'device') : garbage()]],
      ['fillWrite', () => [lease(), count(), random() < 0.5 ? new Uint8Array(allocator.layout.blockBytes) : bytes()]],
      ['commitFill', () => [lease()]],
      ['abortLease', () => [lease()]],
      [
        'importContext',
        () => {
          const diskKeys = keys();
          const sums = diskKeys instanceof Float64Array && random() < 0.8 ? new Uint32Array(diskKeys.length) : garbage();
          return [1 + int(3), count(), diskKeys, sums];
        },
      ],
      ['pageDiskKeys', () => [handle()]],
      ['pageTiers', () => [handle()]],
      ['takeFreedDiskKeys', () => []],
    ];

    const note = (err: unknown, method: string) => {
      if (!(err instanceof FabricError)) throw new Error(`seed ${seed}: ${method} threw a non-FabricError: ${String(err)}`);
      failures.set(err.code, (failures.get(err.code) ?? 0) + 1);
    };

    for (let i = 0; i < CALLS; i++) {
      const [method, args] = calls[int(calls.length)]!;
      let result: unknown;
      try {
        result = pool[method]!(...args());
      } catch (err) {
        note(err, method);
        continue;
      }
      if (result instanceof Promise) {
        inFlight.push(result.catch((err: unknown) => note(err, method)));
        if (inFlight.length > 32) await Promise.all(inFlight.splice(0, 16));
        continue;
      }
      if (
        (method === 'createContext' || method === 'fork' || method === 'forkPrefix' || method === 'importContext') &&
        typeof result === 'number'
      )
        contexts.push(result);
      if (method === 'release') {
        const [h] = args() as [number];
        void h; // the handle passed was random; contexts are pruned below via contextStats
      }
      if ((method === 'beginSpill' || method === 'beginFill') && result) leases.push((result as { lease: number }).lease);
      if (method === 'allocateBlocks' && result instanceof Float64Array) rawBatches.push(result);
      if (i % 500 === 0) {
        // Prune handles that went stale so later calls keep hitting live contexts.
        for (let k = contexts.length - 1; k >= 0; k--) {
          try {
            pool.contextStats!(contexts[k]);
          } catch {
            released.push(...contexts.splice(k, 1));
          }
        }
      }
    }
    await Promise.all(inFlight);

    // Back to baseline: drop open leases, release live contexts, free raw batches still live.
    for (const id of leases) pool.abortLease!(id);
    for (const ctx of contexts) {
      try {
        allocator.release(ctx);
      } catch (err) {
        expect((err as FabricError).code).toBe('STALE_HANDLE');
      }
    }
    for (const batch of rawBatches) {
      try {
        allocator.freeBlocks(batch);
      } catch (err) {
        expect((err as FabricError).code).toBe('STALE_HANDLE');
      }
    }
    expect(allocator.stats()).toMatchObject({
      usedBlocks: 0,
      host: { usedBlocks: 0 },
      contexts: 0,
      sharedBlocks: 0,
      diskOnlyBlocks: 0,
      diskCopies: 0,
    });
    expect(failures.size).toBeGreaterThan(5); // the run reached many different error paths
    allocator.close();
  });
});
