// writePlaneMajorAsync and MemoryFile through the real addon: any range of a context (a fork's shared
// pages included) lands in a memory file exactly where its pieces say, rows or transposed elements, the
// file is reused and grows, and every bad call is a typed error that writes nothing and crashes nothing.
import fs from 'node:fs';

import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';

import { createMemoryFile, NativeAllocator, type MemoryFile, type PlaneMajorPiece } from '../../src/fabric';
import { expectSameBytes } from './implementations';

const SHAPE = { layers: 3, kvHeads: 2, headDim: 3, dtypeBytes: 2 }; // 6 planes of 12-byte rows: 72 bytes a token
const PLANES = 6;
const ROW = 12;
const TOKEN = PLANES * ROW;

const pools: NativeAllocator[] = [];
const files: MemoryFile[] = [];
afterAll(() => {
  for (const file of files) file.close();
  for (const pool of pools) pool.close();
});

function newPool(blockCount = 64): NativeAllocator {
  // The default backend: the CUDA pass of test:asan runs this on the stand-in driver (device frames the CPU cannot address).
  const pool = new NativeAllocator({ shape: SHAPE, blockCount, hostBlockCount: blockCount });
  pools.push(pool);
  return pool;
}

function newFile(): MemoryFile {
  const file = createMemoryFile('kvfabric-test-plane-major');
  files.push(file);
  return file;
}

function tokenBytes(count: number, seed: number): Uint8Array {
  return Uint8Array.from({ length: count * TOKEN }, (_, i) => (seed + i * 29 + (i >> 8) * 11) & 0xff);
}

/** What the pieces should lay out, from token-major rows: the test's own reading of the contract. */
function expectedFile(rows: Uint8Array, tokens: number, pieces: readonly PlaneMajorPiece[]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const piece of pieces) {
    if ('bytes' in piece) {
      parts.push(piece.bytes);
      continue;
    }
    const out = new Uint8Array(tokens * ROW);
    const element = piece.elementBytes ?? 0;
    for (let t = 0; t < tokens; t++) {
      const row = rows.subarray(t * TOKEN + piece.plane * ROW, t * TOKEN + (piece.plane + 1) * ROW);
      if (element === 0) out.set(row, t * ROW);
      else for (let e = 0; e < ROW / element; e++) out.set(row.subarray(e * element, (e + 1) * element), (e * tokens + t) * element);
    }
    parts.push(out);
  }
  return Buffer.concat(parts);
}

function fileBytes(file: MemoryFile, length: number): Uint8Array {
  return fs.readFileSync(file.path).subarray(0, length);
}

const planeOrders = fc.shuffledSubarray([0, 1, 2, 3, 4, 5], { minLength: PLANES, maxLength: PLANES });

describe('writePlaneMajorAsync', () => {
  it('lays any range of a context, forked or not, where its pieces say (property)', async () => {
    const pool = newPool(128);
    const file = newFile();
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 70 }),
        fc.integer({ min: 0, max: 40 }),
        planeOrders,
        fc.array(fc.constantFrom(0, 1, 2, 4), { minLength: PLANES, maxLength: PLANES }),
        fc.uint8Array({ maxLength: 9 }),
        fc.nat(),
        async (parentTokens, childTokens, order, elements, header, pick) => {
          const rows = tokenBytes(parentTokens + childTokens, pick);
          const parent = pool.createContext(1);
          pool.append(parent, rows.subarray(0, parentTokens * TOKEN));
          const child = pool.fork(parent);
          pool.append(child, rows.subarray(parentTokens * TOKEN));
          try {
            const total = parentTokens + childTokens;
            const start = pick % total;
            const count = 1 + ((pick >> 8) % (total - start));
            const pieces: PlaneMajorPiece[] = [{ bytes: header }];
            for (const plane of order) {
              const element = elements[plane]!;
              pieces.push(element === 0 ? { plane } : { plane, elementBytes: element }, { bytes: Uint8Array.of(plane) });
            }
            const length = await pool.writePlaneMajorAsync(child, file, start, count, pieces);
            const want = expectedFile(rows.subarray(start * TOKEN, (start + count) * TOKEN), count, pieces);
            expect(length).toBe(want.length);
            expectSameBytes(fileBytes(file, length), want);
            expect(file.capacity % (2 << 20)).toBe(0);
            expect(file.capacity).toBeGreaterThanOrEqual(length);
          } finally {
            pool.release(child);
            pool.release(parent);
          }
        },
      ),
      { numRuns: 150 },
    );
  });

  it('reads offloaded pages from the host tier; pages only on disk are INVALID_STATE', async () => {
    const pool = newPool();
    const file = newFile();
    const context = pool.createContext(1);
    const rows = tokenBytes(40, 3);
    pool.append(context, rows);
    await pool.demote(context);
    const pieces: PlaneMajorPiece[] = [0, 1, 2, 3, 4, 5].map((plane) => ({ plane }));
    const length = await pool.writePlaneMajorAsync(context, file, 0, 40, pieces);
    expectSameBytes(fileBytes(file, length), expectedFile(rows, 40, pieces));
    const { lease, blocks } = pool.beginSpill(context);
    for (let i = 0; i < blocks; i++) pool.spillRead(lease, i);
    pool.commitSpill(
      lease,
      Float64Array.from({ length: blocks }, (_, i) => i + 1),
      true,
    );
    await expect(pool.writePlaneMajorAsync(context, file, 0, 40, pieces)).rejects.toMatchObject({ code: 'INVALID_STATE' });
    pool.release(context);
  });

  it('grows the file for a bigger write and keeps it for a smaller one', async () => {
    const pool = newPool(512);
    const file = newFile();
    const context = pool.createContext(1);
    const rows = tokenBytes(6000, 5);
    pool.append(context, rows);
    const pieces: PlaneMajorPiece[] = [5, 4, 3, 2, 1, 0].map((plane) => ({ plane }));
    expect(file.capacity).toBe(0);
    await pool.writePlaneMajorAsync(context, file, 0, 10, pieces);
    expect(file.capacity).toBe(2 << 20);
    const big = await pool.writePlaneMajorAsync(context, file, 0, 6000, pieces);
    expect(big).toBe(6000 * TOKEN);
    const grown = file.capacity;
    expect(grown).toBeGreaterThanOrEqual(big);
    const small = await pool.writePlaneMajorAsync(context, file, 100, 10, pieces);
    expect(file.capacity).toBe(grown);
    expectSameBytes(fileBytes(file, small), expectedFile(rows.subarray(100 * TOKEN, 110 * TOKEN), 10, pieces));
    pool.release(context);
  });

  it('refuses bad pieces, ranges, handles and files with typed errors, writing nothing', async () => {
    const pool = newPool();
    const file = newFile();
    const context = pool.createContext(1);
    pool.append(context, tokenBytes(20, 9));
    const all: PlaneMajorPiece[] = [0, 1, 2, 3, 4, 5].map((plane) => ({ plane }));
    const refused = async (call: () => Promise<number>, code: string) => {
      await expect(call()).rejects.toMatchObject({ name: 'FabricError', code });
    };
    await refused(() => pool.writePlaneMajorAsync(context, file, 0, 20, all.slice(1)), 'INVALID_ARGUMENT'); // a plane missing
    await refused(() => pool.writePlaneMajorAsync(context, file, 0, 20, [...all, { plane: 0 }]), 'INVALID_ARGUMENT'); // twice
    await refused(() => pool.writePlaneMajorAsync(context, file, 0, 20, [...all.slice(1), { plane: 6 }]), 'INVALID_ARGUMENT');
    await refused(
      () => pool.writePlaneMajorAsync(context, file, 0, 20, [{ plane: 0, elementBytes: 5 }, ...all.slice(1)]),
      'INVALID_ARGUMENT',
    );
    await refused(() => pool.writePlaneMajorAsync(context, file, 0, 20, [{ bytes: 'header' as never }, ...all]), 'INVALID_ARGUMENT');
    await refused(() => pool.writePlaneMajorAsync(context, file, 0, 20, 'planes' as never), 'INVALID_ARGUMENT');
    await refused(() => pool.writePlaneMajorAsync(context, {} as MemoryFile, 0, 20, all), 'INVALID_ARGUMENT');
    await refused(() => pool.writePlaneMajorAsync(context, file, 5, 16, all), 'OUT_OF_RANGE');
    await refused(() => pool.writePlaneMajorAsync(context + 1, file, 0, 1, all), 'STALE_HANDLE');
    expect(file.capacity).toBe(0); // nothing was written
    // One write at a time: a second, and a close, while one runs are BUSY; afterwards both work.
    const first = pool.writePlaneMajorAsync(context, file, 0, 20, all);
    await refused(() => pool.writePlaneMajorAsync(context, file, 0, 20, all), 'BUSY');
    expect(() => file.close()).toThrow(expect.objectContaining({ code: 'BUSY' }));
    await first;
    await pool.writePlaneMajorAsync(context, file, 0, 20, all);
    file.close();
    expect(file.path).toBe('');
    await refused(() => pool.writePlaneMajorAsync(context, file, 0, 20, all), 'INVALID_STATE');
    pool.release(context);
  });
});
