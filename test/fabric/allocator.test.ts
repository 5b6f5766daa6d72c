// Every allocator operation and error, run against the native and the TypeScript implementation.
import { afterEach, describe, expect, it } from 'vitest';

import { FabricError, type ErrorCode, type KvAllocator } from '../../src/fabric';
import { implementations, tinyShape, tokenBytes, TINY_BYTES_PER_TOKEN } from './implementations';

function expectCode(fn: () => unknown, code: ErrorCode): void {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught, `expected ${code}`).toBeInstanceOf(FabricError);
  expect((caught as FabricError).code).toBe(code);
}

describe.each(implementations)('$name allocator', ({ create }) => {
  let pool: KvAllocator;
  const open = (blockCount = 16, extra: object = {}) => {
    pool = create({ shape: tinyShape, tokensPerBlock: 4, blockCount, ...extra });
    return pool;
  };
  afterEach(() => pool?.close());

  describe('options and layout', () => {
    it('derives the block-major layout from the model shape', () => {
      const llama = create({ shape: { layers: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 }, blockCount: 1 });
      expect(llama.layout).toEqual({
        tokensPerBlock: 16,
        bytesPerToken: 128 * 1024,
        blockBytes: 2 * 1024 * 1024,
        planes: 64,
        planeBytes: 16 * 2048,
        tokenPlaneBytes: 2048,
      });
      llama.close();
      open();
    });

    it.each([
      [{ shape: tinyShape, blockCount: 0 }],
      [{ shape: tinyShape, blockCount: -1 }],
      [{ shape: tinyShape, blockCount: 1.5 }],
      [{ shape: tinyShape, blockCount: 2 ** 40 }],
      [{ shape: { ...tinyShape, layers: 0 }, blockCount: 1 }],
      [{ shape: { ...tinyShape, headDim: Number.NaN }, blockCount: 1 }],
      [{ shape: { layers: 2 ** 20, kvHeads: 2 ** 20, headDim: 1, dtypeBytes: 1 }, blockCount: 1 }],
      [{ shape: tinyShape, blockCount: 1, tokensPerBlock: 2 ** 30 }],
      [{ shape: tinyShape, blockCount: 1, scrub: 'sometimes' }],
      [{ shape: tinyShape, blockCount: 1, maxContexts: 0 }],
      [{ blockCount: 1 }],
      [null],
    ])('rejects bad options %j with INVALID_ARGUMENT', (options) => {
      expectCode(() => create(options as never), 'INVALID_ARGUMENT');
      open();
    });

    it('starts with every block free and zero waste', () => {
      open(16);
      expect(pool.stats()).toEqual({
        totalBlocks: 16,
        freeBlocks: 16,
        usedBlocks: 0,
        sharedBlocks: 0,
        blockBytes: 32,
        totalBytes: 512,
        usedBytes: 0,
        freeBytes: 512,
        contexts: 0,
        wasteBytes: 0,
        host: { totalBlocks: 0, freeBlocks: 0, usedBlocks: 0 },
        diskOnlyBlocks: 0,
        diskCopies: 0,
      });
    });
  });

  describe('append and read', () => {
    it('reads back exactly the bytes appended, across block boundaries', () => {
      open();
      const ctx = pool.createContext(1);
      const first = tokenBytes(3, 1);
      const second = tokenBytes(7, 2);
      pool.append(ctx, first);
      pool.append(ctx, second);
      expect(pool.read(ctx, 0, 10)).toEqual(new Uint8Array([...first, ...second]));
      expect(pool.read(ctx, 2, 5)).toEqual(new Uint8Array([...first, ...second]).subarray(16, 56));
      expect(pool.read(ctx, 10, 0)).toEqual(new Uint8Array(0));
      expect(pool.contextStats(ctx)).toEqual({
        tenant: 1,
        tokens: 10,
        blocks: 3,
        sharedBlocks: 0,
        pinCount: 0,
        bytes: 80,
        wasteBytes: 2 * TINY_BYTES_PER_TOKEN,
        resident: true,
        devicePages: 3,
        hostPages: 0,
        diskOnlyPages: 0,
        diskCopies: 0,
      });
      expect(pool.stats().wasteBytes).toBe(2 * TINY_BYTES_PER_TOKEN);
    });

    it('stores each token in layer-major planes inside its block', () => {
      open();
      const ctx = pool.createContext(1);
      const kv = tokenBytes(2, 5);
      pool.append(ctx, kv);
      const block = pool.readBlock(ctx, 0);
      const { planes, planeBytes, tokenPlaneBytes, bytesPerToken } = pool.layout;
      for (let token = 0; token < 2; token++) {
        for (let plane = 0; plane < planes; plane++) {
          const at = plane * planeBytes + token * tokenPlaneBytes;
          const from = token * bytesPerToken + plane * tokenPlaneBytes;
          expect(block.subarray(at, at + tokenPlaneBytes)).toEqual(kv.subarray(from, from + tokenPlaneBytes));
        }
      }
    });

    it('appends asynchronously and reads asynchronously', async () => {
      open();
      const ctx = pool.createContext(3);
      const kv = tokenBytes(9, 3);
      await pool.appendAsync(ctx, kv);
      await expect(pool.readAsync(ctx, 0, 9)).resolves.toEqual(kv);
      await expect(pool.readAsync(ctx, 0, 10)).rejects.toMatchObject({ code: 'OUT_OF_RANGE' });
      await expect(pool.appendAsync(ctx, new Uint8Array(3))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    });

    it('treats an empty append as a no-op', () => {
      open();
      const ctx = pool.createContext(1);
      pool.append(ctx, new Uint8Array(0));
      expect(pool.contextStats(ctx).blocks).toBe(0);
    });

    it('rejects partial tokens and out-of-range reads without changing anything', () => {
      open();
      const ctx = pool.createContext(1);
      pool.append(ctx, tokenBytes(2, 1));
      const before = pool.stats();
      expectCode(() => pool.append(ctx, new Uint8Array(TINY_BYTES_PER_TOKEN + 1)), 'INVALID_ARGUMENT');
      expectCode(() => pool.read(ctx, 1, 2), 'OUT_OF_RANGE');
      expectCode(() => pool.read(ctx, 3, 0), 'OUT_OF_RANGE');
      expectCode(() => pool.readBlock(ctx, 1), 'OUT_OF_RANGE');
      expect(pool.stats()).toEqual(before);
      expect(pool.read(ctx, 0, 2)).toEqual(tokenBytes(2, 1));
    });

    it('fails an append that needs more blocks than are free, leaving the context as it was', () => {
      open(3);
      const ctx = pool.createContext(1);
      pool.append(ctx, tokenBytes(5, 1));
      const before = { pool: pool.stats(), ctx: pool.contextStats(ctx), table: pool.blockTable(ctx) };
      expectCode(() => pool.append(ctx, tokenBytes(8, 2)), 'POOL_EXHAUSTED');
      expect(pool.stats()).toEqual(before.pool);
      expect(pool.contextStats(ctx)).toEqual(before.ctx);
      expect(pool.blockTable(ctx)).toEqual(before.table);
      expect(pool.read(ctx, 0, 5)).toEqual(tokenBytes(5, 1));
      pool.append(ctx, tokenBytes(7, 3)); // exactly fills the pool
      expect(pool.stats().freeBlocks).toBe(0);
    });
  });

  describe('fork and copy-on-write', () => {
    it('shares every block with the child and copies the partial last block on write', () => {
      open();
      const parent = pool.createContext(4);
      pool.append(parent, tokenBytes(6, 1));
      const child = pool.fork(parent);
      expect(pool.blockTable(child)).toEqual(pool.blockTable(parent));
      expect(pool.stats()).toMatchObject({ usedBlocks: 2, sharedBlocks: 2, contexts: 2 });
      expect(pool.contextStats(child)).toMatchObject({ tenant: 4, tokens: 6, sharedBlocks: 2 });

      pool.append(child, tokenBytes(1, 9));
      const parentTable = pool.blockTable(parent);
      const childTable = pool.blockTable(child);
      expect(childTable[0]).toBe(parentTable[0]);
      expect(childTable[1]).not.toBe(parentTable[1]);
      expect(pool.stats()).toMatchObject({ usedBlocks: 3, sharedBlocks: 1 });
      expect(pool.read(parent, 0, 6)).toEqual(tokenBytes(6, 1));
      expect(pool.read(child, 0, 7)).toEqual(new Uint8Array([...tokenBytes(6, 1), ...tokenBytes(1, 9)]));

      pool.append(parent, tokenBytes(2, 7)); // the parent's block is private again: written in place
      expect(pool.blockTable(parent)[1]).toBe(parentTable[1]);
      expect(pool.read(child, 0, 7)).toEqual(new Uint8Array([...tokenBytes(6, 1), ...tokenBytes(1, 9)]));
    });

    it('does not copy a full shared block: the child continues in a new block', () => {
      open();
      const parent = pool.createContext(1);
      pool.append(parent, tokenBytes(4, 1));
      const child = pool.fork(parent);
      pool.append(child, tokenBytes(1, 2));
      expect(pool.blockTable(child)[0]).toBe(pool.blockTable(parent)[0]);
      expect(pool.stats()).toMatchObject({ usedBlocks: 2, sharedBlocks: 1 });
    });

    it('counts a copy-on-write block against exhaustion', () => {
      open(2);
      const parent = pool.createContext(1);
      pool.append(parent, tokenBytes(6, 1));
      const child = pool.fork(parent);
      expectCode(() => pool.append(child, tokenBytes(1, 2)), 'POOL_EXHAUSTED');
      expect(pool.stats()).toMatchObject({ usedBlocks: 2, sharedBlocks: 2 });
      pool.release(parent);
      pool.append(child, tokenBytes(1, 2)); // no longer shared: written in place
      expect(pool.stats()).toMatchObject({ usedBlocks: 2, sharedBlocks: 0 });
    });

    it('keeps shared blocks alive until the last sharer releases them', () => {
      open();
      const parent = pool.createContext(1);
      pool.append(parent, tokenBytes(8, 1));
      const children = [pool.fork(parent), pool.fork(parent), pool.fork(parent)];
      pool.release(parent);
      expect(pool.stats()).toMatchObject({ usedBlocks: 2, sharedBlocks: 2, contexts: 3 });
      for (const child of children) expect(pool.read(child, 0, 8)).toEqual(tokenBytes(8, 1));
      for (const child of children) pool.release(child);
      expect(pool.stats()).toMatchObject({ usedBlocks: 0, freeBlocks: 16, sharedBlocks: 0, contexts: 0 });
    });
  });

  describe('pin, release and handles', () => {
    it('counts pins and refuses to unpin an unpinned context', () => {
      open();
      const ctx = pool.createContext(1);
      pool.pin(ctx);
      pool.pin(ctx);
      expect(pool.contextStats(ctx).pinCount).toBe(2);
      pool.unpin(ctx);
      pool.unpin(ctx);
      expectCode(() => pool.unpin(ctx), 'INVALID_STATE');
      expect(pool.contextStats(ctx).pinCount).toBe(0);
    });

    it('releases a pinned context and makes its handle stale for every operation', () => {
      open();
      const ctx = pool.createContext(1);
      pool.append(ctx, tokenBytes(5, 1));
      pool.pin(ctx);
      pool.release(ctx);
      expect(pool.stats()).toMatchObject({ freeBlocks: 16, contexts: 0 });
      const ops: Array<() => unknown> = [
        () => pool.release(ctx),
        () => pool.append(ctx, tokenBytes(1, 1)),
        () => pool.read(ctx, 0, 0),
        () => pool.readBlock(ctx, 0),
        () => pool.fork(ctx),
        () => pool.pin(ctx),
        () => pool.unpin(ctx),
        () => pool.blockTable(ctx),
        () => pool.contextStats(ctx),
      ];
      for (const op of ops) expectCode(op, 'STALE_HANDLE');
    });

    it('never lets a released handle reach a context that reuses its slot', () => {
      open();
      const old = pool.createContext(1);
      pool.release(old);
      const reused = pool.createContext(2);
      pool.append(reused, tokenBytes(1, 1));
      expect(reused).not.toBe(old);
      expectCode(() => pool.read(old, 0, 1), 'STALE_HANDLE');
      expectCode(() => pool.release(old), 'STALE_HANDLE');
      expect(pool.contextStats(reused).tokens).toBe(1);
    });

    it.each([0, -1, 1.5, Number.NaN, 2 ** 53, '1', null, undefined, {}])('rejects the context handle %s', (handle) => {
      open();
      let caught: FabricError | undefined;
      try {
        pool.contextStats(handle as never);
      } catch (err) {
        caught = err as FabricError;
      }
      expect(caught).toBeInstanceOf(FabricError);
      expect(['INVALID_ARGUMENT', 'STALE_HANDLE']).toContain(caught?.code);
    });

    it.each([0, -3, 2 ** 32, 1.25, 'acme', undefined])('rejects the tenant %s', (tenant) => {
      open();
      expectCode(() => pool.createContext(tenant as never), 'INVALID_ARGUMENT');
      expect(pool.stats().contexts).toBe(0);
    });

    it('limits live contexts to maxContexts', () => {
      open(4, { maxContexts: 2 });
      const a = pool.createContext(1);
      pool.createContext(1);
      expectCode(() => pool.createContext(1), 'POOL_EXHAUSTED');
      expectCode(() => pool.fork(a), 'POOL_EXHAUSTED');
      pool.release(a);
      pool.createContext(1);
    });
  });

  describe('scrubbing', () => {
    it('zeroes a block before another tenant gets it', () => {
      open(1);
      const a = pool.createContext(1);
      pool.append(a, tokenBytes(4, 1));
      pool.release(a);
      const b = pool.createContext(2);
      pool.append(b, tokenBytes(1, 2));
      const raw = pool.readBlock(b, 0);
      const { planes, planeBytes, tokenPlaneBytes } = pool.layout;
      for (let plane = 0; plane < planes; plane++) {
        const unfilled = raw.subarray(plane * planeBytes + tokenPlaneBytes, (plane + 1) * planeBytes);
        expect(unfilled.every((byte) => byte === 0)).toBe(true);
      }
    });

    it('keeps a tenant own stale bytes under on-tenant-change and zeroes them under always', () => {
      for (const scrub of ['on-tenant-change', 'always'] as const) {
        pool?.close();
        open(1, { scrub });
        const a = pool.createContext(1);
        pool.append(a, tokenBytes(4, 1));
        pool.release(a);
        const again = pool.createContext(1);
        pool.append(again, tokenBytes(1, 2));
        const tail = pool.readBlock(again, 0).subarray(pool.layout.tokenPlaneBytes, pool.layout.planeBytes);
        expect(tail.some((byte) => byte !== 0)).toBe(scrub === 'on-tenant-change');
      }
    });
  });

  describe('raw blocks', () => {
    it('allocates and frees batches of generation-checked handles', () => {
      open(8);
      const handles = pool.allocateBlocks(1, 5);
      expect(handles).toHaveLength(5);
      expect(pool.stats()).toMatchObject({ usedBlocks: 5, wasteBytes: 0 });
      expect(pool.allocateBlocks(1, 0)).toHaveLength(0);
      expectCode(() => pool.allocateBlocks(1, 4), 'POOL_EXHAUSTED');
      pool.freeBlocks(handles.subarray(0, 2));
      expectCode(() => pool.freeBlocks(handles.subarray(1, 3)), 'STALE_HANDLE'); // handle 1 already freed
      expect(pool.stats().usedBlocks).toBe(3); // handle 2 was not freed either
      expectCode(() => pool.freeBlocks(new Float64Array([handles[2]!, handles[2]!])), 'STALE_HANDLE');
      expectCode(() => pool.freeBlocks(new Float64Array([0.5])), 'INVALID_ARGUMENT');
      expectCode(() => pool.freeBlocks([handles[2]] as never), 'INVALID_ARGUMENT');
      pool.freeBlocks(handles.subarray(2));
      expect(pool.stats().freeBlocks).toBe(8);
    });

    it('refuses to free a block that belongs to a context', () => {
      open(4);
      const ctx = pool.createContext(1);
      pool.append(ctx, tokenBytes(1, 1));
      const raw = pool.allocateBlocks(1, 1);
      const generation = Math.floor(raw[0]! / 2 ** 32);
      const contextBlock = pool.blockTable(ctx)[0]!;
      // Guess generation 1 for the context's block, which has never been freed.
      expectCode(() => pool.freeBlocks(new Float64Array([2 ** 32 + contextBlock])), 'INVALID_ARGUMENT');
      expect(generation).toBeGreaterThanOrEqual(1);
      expect(pool.contextStats(ctx).tokens).toBe(1);
    });
  });

  it('refuses every call after close, and closes twice quietly', () => {
    open();
    const ctx = pool.createContext(1);
    pool.close();
    pool.close();
    expectCode(() => pool.stats(), 'INVALID_STATE');
    expectCode(() => pool.createContext(1), 'INVALID_STATE');
    expectCode(() => pool.read(ctx, 0, 0), 'INVALID_STATE');
  });
});
