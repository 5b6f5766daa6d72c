// The N-API boundary: whatever a plain-JS caller passes, the addon answers with a FabricError and the
// process survives; async work really runs concurrently and keeps its memory alive past close().
import { afterEach, describe, expect, it } from 'vitest';

import { FabricError, NativeAllocator } from '../../src/fabric';
import { loadNativeBinding } from '../../src/fabric/native-binding';
import { declaredAddonExports } from './addon-declaration';
import { concatBytes, expectSameBytes, tinyShape, tokenBytes } from './implementations';

const garbage: unknown[] = [
  undefined,
  null,
  true,
  'x',
  Symbol('s'),
  {},
  [],
  () => 1,
  -1,
  -0.5,
  0.5,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  2 ** 53,
  2 ** 64,
  1n,
  new Uint8Array(3),
  new Float64Array(2),
];

describe('native addon boundary', () => {
  let pool: NativeAllocator;
  afterEach(() => pool?.close());

  it('answers every garbage argument to every declared method with a FabricError, sync or async', async () => {
    pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8 });
    const raw = pool as unknown as Record<string, (...args: unknown[]) => unknown>; // as plain JS would call it
    const ctx = pool.createContext(1);
    pool.append(ctx, tokenBytes(2, 1));
    const declared = declaredAddonExports().find((d) => d.name === 'NativePool')!.methods!;
    // close() ends the pool, so it comes last, once the pool's bytes are checked.
    const methods = [...declared.filter((m) => m !== 'close'), 'close'];
    const expectFabric = (err: unknown, call: string) => expect(err, call).toBeInstanceOf(FabricError);
    let calls = 0;
    for (const method of methods) {
      if (method === 'close') expect(pool.read(ctx, 0, 2)).toEqual(tokenBytes(2, 1));
      for (const a of garbage) {
        for (const b of [a, ctx, 0]) {
          const call = `${method}(${String(a)}, ${String(b)})`;
          try {
            const result = raw[method]!.call(raw, a, b, b);
            if (result instanceof Promise) await result.catch((err: unknown) => expectFabric(err, call));
          } catch (err) {
            expectFabric(err, call);
          }
          calls++;
        }
      }
    }
    expect(calls).toBe(methods.length * garbage.length * 3);
    expect(() => pool.stats()).toThrow(expect.objectContaining({ code: 'INVALID_STATE' }));
  });

  it('rejects async calls with bad arguments instead of throwing synchronously', async () => {
    pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8 });
    await expect(pool.appendAsync('x' as never, new Uint8Array(8))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(pool.appendAsync(1, 'x' as never)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(pool.readAsync(12345, 0, 0)).rejects.toMatchObject({ code: 'STALE_HANDLE' });
  });

  it('refuses to build a pool the OS cannot back', () => {
    expect(() => new NativeAllocator({ shape: { layers: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 }, blockCount: 2 ** 32 - 2 })).toThrow(
      expect.objectContaining({ code: 'OUT_OF_MEMORY' }),
    );
  });

  it('runs many async appends and reads concurrently with exact bytes and baseline accounting', async () => {
    const shape = { layers: 4, kvHeads: 2, headDim: 64, dtypeBytes: 2 }; // 2 KiB per token
    pool = new NativeAllocator({ shape, tokensPerBlock: 16, blockCount: 4096 });
    const bpt = pool.layout.bytesPerToken;
    const contexts = Array.from({ length: 32 }, (_, i) => pool.createContext(1 + (i % 4)));
    const payloads = contexts.map((_, i) => tokenBytes(100 + i * 3, i, bpt));
    await Promise.all(contexts.map((ctx, i) => pool.appendAsync(ctx, payloads[i]!)));
    const forks = contexts.map((ctx) => pool.fork(ctx));
    const tails = forks.map((_, i) => tokenBytes(5, 100 + i, bpt));
    const [reads] = await Promise.all([
      Promise.all(contexts.map((ctx, i) => pool.readAsync(ctx, 0, payloads[i]!.length / bpt))),
      Promise.all(forks.map((child, i) => pool.appendAsync(child, tails[i]!))),
    ]);
    reads.forEach((bytes, i) => expectSameBytes(bytes, payloads[i]!));
    for (const [i, child] of forks.entries()) {
      expectSameBytes(pool.read(child, 0, payloads[i]!.length / bpt + 5), concatBytes(payloads[i]!, tails[i]!));
    }
    for (const ctx of [...contexts, ...forks]) pool.release(ctx);
    expect(pool.stats()).toMatchObject({ freeBlocks: 4096, sharedBlocks: 0, contexts: 0, wasteBytes: 0 });
  });

  it('answers BUSY to a release or fork racing an append, and keeps the append', async () => {
    pool = new NativeAllocator({ shape: { layers: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 }, blockCount: 64 });
    const ctx = pool.createContext(1);
    const kv = tokenBytes(512, 3, pool.layout.bytesPerToken); // 64 MiB: long enough to still be in flight
    const pending = pool.appendAsync(ctx, kv);
    expect(() => pool.release(ctx)).toThrow(expect.objectContaining({ code: 'BUSY' }));
    expect(() => pool.fork(ctx)).toThrow(expect.objectContaining({ code: 'BUSY' }));
    await expect(pool.appendAsync(ctx, kv.subarray(0, pool.layout.bytesPerToken))).rejects.toMatchObject({ code: 'BUSY' });
    expect(pool.contextStats(ctx).tokens).toBe(0); // not published until the bytes are in place
    await pending;
    expect(pool.contextStats(ctx).tokens).toBe(512);
    expectSameBytes(await pool.readAsync(ctx, 511, 1), kv.subarray(511 * pool.layout.bytesPerToken));
  });

  it('lets a pool close while async work is in flight; the work completes on memory it still holds', async () => {
    pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 1024 });
    const ctx = pool.createContext(1);
    pool.append(ctx, tokenBytes(2000, 1));
    const reads = Array.from({ length: 16 }, () => pool.readAsync(ctx, 0, 2000));
    pool.close();
    for (const bytes of await Promise.all(reads)) expectSameBytes(bytes, tokenBytes(2000, 1));
    expect(() => pool.stats()).toThrow(expect.objectContaining({ code: 'INVALID_STATE' }));
  });

  it('loads one binding with the registered error class', () => {
    const binding = loadNativeBinding();
    expect(binding.abiVersion).toBe(4);
    expect(() => new binding.NativePool({} as never)).toThrow(FabricError); // no shape: refused natively
  });
});
