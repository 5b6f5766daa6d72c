// Attack class 4 of issue 25: native async calls and caller memory that moves. A caller detaches
// (structuredClone or postMessage with transfer, ArrayBuffer.prototype.transfer where Node has it) or
// shrinks (resizable ArrayBuffer) the buffer of an append while the append is in flight, writes a
// SharedArrayBuffer from another thread meanwhile, or hands the AES-GCM calls objects whose getters detach
// buffers read before. Each gets a typed error with nothing appended, or exactly the bytes it gave; never
// a crash. The allocator does not audit (no capability is involved at this layer). scripts/test-asan.sh
// runs this file on the ASan/UBSan build too.
import { createCipheriv } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { MessageChannel, Worker } from 'node:worker_threads';

import { afterEach, describe, expect, it } from 'vitest';

import { crc32c, FabricError, NativeAllocator } from '../../../src/fabric';
import { loadNativeBinding } from '../../../src/fabric/native-binding';
import { TieredMemory } from '../../../src/tiers/tiered-memory';

// Llama-3-8B's token size (128 KiB): a 128-token append is 16 MiB, several of the addon's 4 MiB pieces.
const shape = { layers: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 };
const BYTES_PER_TOKEN = 128 * 1024;
const TPB = 16;
const MULTI_PIECE_TOKENS = 128;

let pool: NativeAllocator | undefined;
afterEach(() => {
  pool?.close();
  pool = undefined;
});

function open(): NativeAllocator {
  // The default backend: scripts/test-cuda-fake.sh runs this file through the CUDA backend's code too.
  pool = new NativeAllocator({ shape, tokensPerBlock: TPB, blockCount: 48, hostBlockCount: 16 });
  return pool;
}

/** Deterministic non-zero bytes for `tokens` tokens. */
function pattern(tokens: number, seed: number, into = new Uint8Array(tokens * BYTES_PER_TOKEN)): Uint8Array {
  for (let i = 0; i < into.length; i++) into[i] = ((i * 31 + seed) % 251) + 1;
  return into;
}

/** Another agent's context (tenant 2) that no attack may touch, and what it holds. */
async function bystander(p: NativeAllocator) {
  const ctx = p.createContext(2);
  await p.appendAsync(ctx, pattern(20, 9));
  return { ctx, bytes: p.read(ctx, 0, 20), checksums: p.pageChecksums(ctx) };
}

/** ES2024's resizable ArrayBuffer, which this project's TypeScript lib does not declare yet. */
interface ResizableArrayBuffer extends ArrayBuffer {
  resize(byteLength: number): void;
}
function resizable(length: number): ResizableArrayBuffer {
  const Resizable = ArrayBuffer as unknown as new (length: number, options: { maxByteLength: number }) => ResizableArrayBuffer;
  return new Resizable(length, { maxByteLength: length });
}

type Detach = (buffer: ArrayBuffer) => void;
const detachers: Array<[string, Detach]> = [
  ['structuredClone with transfer', (buffer) => void structuredClone(buffer, { transfer: [buffer] })],
  [
    'postMessage with transfer to a port that is closed',
    (buffer) => {
      const { port1, port2 } = new MessageChannel();
      port1.postMessage(buffer, [buffer]);
      port1.close();
      port2.close();
    },
  ],
];
const transfer = (ArrayBuffer.prototype as { transfer?: (this: ArrayBuffer) => ArrayBuffer }).transfer;
if (typeof transfer === 'function') detachers.push(['ArrayBuffer.prototype.transfer', (buffer) => void transfer.call(buffer)]);

/** What must be unchanged after a refused append: the pool's counts, the context's bytes, the bystander. */
async function expectNothingChanged(
  p: NativeAllocator,
  ctx: number,
  before: { stats: ReturnType<NativeAllocator['stats']>; tokens: number; bytes: Uint8Array },
  other: Awaited<ReturnType<typeof bystander>>,
) {
  expect(p.stats()).toEqual(before.stats);
  expect(p.contextStats(ctx).tokens).toBe(before.tokens);
  expect(Buffer.from(p.read(ctx, 0, before.tokens)).equals(Buffer.from(before.bytes))).toBe(true);
  expect(Buffer.from(p.read(other.ctx, 0, 20)).equals(Buffer.from(other.bytes))).toBe(true);
  expect(p.pageChecksums(other.ctx)).toEqual(other.checksums);
  // The context is not left BUSY: the next append goes through.
  await p.appendAsync(ctx, pattern(1, 3));
  expect(p.contextStats(ctx).tokens).toBe(before.tokens + 1);
}

async function victimWithPrefix(p: NativeAllocator) {
  const ctx = p.createContext(1);
  await p.appendAsync(ctx, pattern(5, 1)); // a partly filled last block: the append writes into it too
  return { ctx, before: { stats: p.stats(), tokens: 5, bytes: p.read(ctx, 0, 5) } };
}

describe('native-buffer attacks: NativeAllocator.appendAsync', () => {
  it.each([
    ['to nothing', 0],
    ['to half its length', (MULTI_PIECE_TOKENS / 2) * BYTES_PER_TOKEN],
  ])('refuses an append whose resizable ArrayBuffer is shrunk %s while in flight, appending nothing', async (_, to) => {
    const p = open();
    const other = await bystander(p);
    const { ctx, before } = await victimWithPrefix(p);
    const length = MULTI_PIECE_TOKENS * BYTES_PER_TOKEN;
    const buffer = resizable(length);
    pattern(MULTI_PIECE_TOKENS, 5, new Uint8Array(buffer));
    const append = p.appendAsync(ctx, new Uint8Array(buffer)); // a length-tracking view
    buffer.resize(to);
    const error = await append.then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(FabricError);
    expect(error).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(/resized while its append was in flight .*nothing was appended/),
    });
    await expectNothingChanged(p, ctx, before, other);
  });

  it.each(detachers)('refuses an append whose buffer is detached by %s while in flight, appending nothing', async (_, detach) => {
    const p = open();
    const other = await bystander(p);
    const { ctx, before } = await victimWithPrefix(p);
    const kv = pattern(MULTI_PIECE_TOKENS, 6);
    const append = p.appendAsync(ctx, kv);
    detach(kv.buffer as ArrayBuffer);
    expect(kv.byteLength).toBe(0); // really detached
    await expect(append).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/detached/) });
    await expectNothingChanged(p, ctx, before, other);
  });

  it.each(detachers)(
    'appends exactly the bytes it was given when %s detaches the buffer after its one piece was taken',
    async (_, detach) => {
      const p = open();
      const ctx = p.createContext(1);
      const kv = pattern(8, 7); // 1 MiB: one piece, taken during the call
      const expected = Uint8Array.from(kv);
      const append = p.appendAsync(ctx, kv);
      detach(kv.buffer as ArrayBuffer);
      await append;
      expect(Buffer.from(p.read(ctx, 0, 8)).equals(Buffer.from(expected))).toBe(true);
    },
  );

  it("appends a Buffer from Node's shared pool exactly (its own bytes, not the slab around it)", async () => {
    const small = new NativeAllocator({ shape: { layers: 1, kvHeads: 1, headDim: 4, dtypeBytes: 1 }, tokensPerBlock: 4, blockCount: 4 });
    try {
      const ctx = small.createContext(1);
      const kv = Buffer.from('0123456789abcdef', 'latin1'); // 16 bytes in the 8 KiB pool, at an offset
      expect(kv.byteOffset).toBeGreaterThan(-1);
      const append = small.appendAsync(ctx, kv);
      structuredClone(kv.buffer, { transfer: [kv.buffer as ArrayBuffer] }); // the pool is untransferable: copied, not moved
      await append;
      expect(Buffer.from(small.read(ctx, 0, 2)).toString('latin1')).toBe('0123456789abcdef');
    } finally {
      small.close();
    }
  });
});

describe('native-buffer attacks: a SharedArrayBuffer another thread writes during the append', () => {
  /** A real thread that rewrites the whole buffer until told to stop (flag in the first Int32). */
  function startWriter(shared: SharedArrayBuffer): { stop: () => Promise<void> } {
    const worker = new Worker(
      `const { workerData } = require('node:worker_threads');
       const flag = new Int32Array(workerData, 0, 1);
       const bytes = new Uint8Array(workerData, 4096);
       Atomics.store(flag, 0, 1);
       for (let round = 1; Atomics.load(flag, 0) === 1; round++) bytes.fill(round & 0xff);`,
      { eval: true, workerData: shared },
    );
    const flag = new Int32Array(shared, 0, 1);
    return {
      stop: async () => {
        Atomics.store(flag, 0, 2);
        await worker.terminate();
      },
    };
  }

  /** Each page's recorded checksum is the CRC-32C of the bytes that landed: no move will fail INTEGRITY. */
  function expectChecksumsMatchBytes(p: NativeAllocator, ctx: number, tokens: number) {
    const sums = p.pageChecksums(ctx);
    for (let page = 0; page * TPB < tokens; page++) {
      const count = Math.min(TPB, tokens - page * TPB);
      expect(crc32c(p.read(ctx, page * TPB, count))).toBe(sums[page]);
    }
  }

  it('lands the append (async and sync) with checksums of exactly what landed, and moves verify', async () => {
    const p = open();
    const shared = new SharedArrayBuffer(4096 + MULTI_PIECE_TOKENS * BYTES_PER_TOKEN);
    const writer = startWriter(shared);
    const flag = new Int32Array(shared, 0, 1);
    while (Atomics.load(flag, 0) !== 1) await nextTurn(); // the writer is running
    const kv = new Uint8Array(shared, 4096);
    try {
      const asyncCtx = p.createContext(1);
      await p.appendAsync(asyncCtx, kv);
      const syncCtx = p.createContext(1);
      p.append(syncCtx, kv.subarray(0, 32 * BYTES_PER_TOKEN));
      expectChecksumsMatchBytes(p, asyncCtx, MULTI_PIECE_TOKENS);
      expectChecksumsMatchBytes(p, syncCtx, 32);
      await p.demote(asyncCtx); // every block checked against its checksum as it moves
      await p.promote(asyncCtx);
    } finally {
      await writer.stop();
    }
  });
});

describe('native-buffer attacks: TieredMemory.append', () => {
  function tiers() {
    const p = open();
    return { p, memory: new TieredMemory({ pool: p, deviceLowWatermark: 0, hostLowWatermark: 0 }) };
  }

  it('refuses an append whose buffer was detached while it waited for the context, appending nothing', async () => {
    const { p, memory } = tiers();
    memory.create('victim', 1);
    const first = pattern(MULTI_PIECE_TOKENS, 2);
    const queued = pattern(16, 3);
    const running = memory.append('victim', first);
    const waiting = memory.append('victim', queued); // behind the first, on the context's lock
    structuredClone(queued.buffer, { transfer: [queued.buffer as ArrayBuffer] });
    await running;
    await expect(waiting).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(/before the append ran.*nothing was appended/),
    });
    expect(memory.contextStats('victim').tokens).toBe(MULTI_PIECE_TOKENS);
    expect(Buffer.from(await memory.read('victim', 0, MULTI_PIECE_TOKENS)).equals(Buffer.from(pattern(MULTI_PIECE_TOKENS, 2)))).toBe(true);
    expect(p.stats().contexts).toBe(1);
  });

  it.each([
    ['detached (structuredClone with transfer)', (buffer: ArrayBuffer) => void structuredClone(buffer, { transfer: [buffer] })],
    ['shrunk (resizable ArrayBuffer)', (buffer: ArrayBuffer) => (buffer as ResizableArrayBuffer).resize(0)],
  ])('refuses an append whose buffer is %s once the native append is under way, appending nothing', async (_, spoil) => {
    const { p, memory } = tiers();
    const other = await bystander(p);
    memory.create('victim', 1);
    await memory.append('victim', pattern(5, 1));
    const before = { stats: p.stats(), bytes: await memory.read('victim', 0, 5) };
    const length = MULTI_PIECE_TOKENS * BYTES_PER_TOKEN;
    const buffer = resizable(length);
    pattern(MULTI_PIECE_TOKENS, 4, new Uint8Array(buffer));
    const append = memory.append('victim', new Uint8Array(buffer));
    // Blocks reserved and no token published: the native append holds the context, a piece at a time
    // (each piece is a trip to the thread pool and back, so the loop turns between pieces).
    while (!(p.stats().usedBlocks > before.stats.usedBlocks && p.contextStats(memory.handle('victim')).tokens === 5)) await nextTurn();
    spoil(buffer);
    await expect(append).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(/while its append was in flight .*nothing was appended/),
    });
    expect(p.stats()).toEqual(before.stats);
    expect(memory.contextStats('victim').tokens).toBe(5);
    expect(Buffer.from(await memory.read('victim', 0, 5)).equals(Buffer.from(before.bytes))).toBe(true);
    expect(Buffer.from(p.read(other.ctx, 0, 20)).equals(Buffer.from(other.bytes))).toBe(true);
    await memory.append('victim', pattern(3, 8)); // not left BUSY
    expect(memory.contextStats('victim').tokens).toBe(8);
  });
});

describe('native-buffer attacks: AES-GCM in place with hostile getters', () => {
  interface Gcm {
    gcmAvailable: boolean;
    gcmSeal(key: Uint8Array, bytes: Uint8Array, items: object[]): Uint8Array;
    gcmOpen(key: Uint8Array, bytes: Uint8Array, items: object[]): number;
  }
  const gcm = loadNativeBinding() as unknown as Gcm;
  const key = new Uint8Array(32).fill(7);

  it.skipIf(!gcm.gcmAvailable)('refuses bytes detached by a getter of an item, instead of writing through a stale pointer', () => {
    for (const call of [gcm.gcmSeal, gcm.gcmOpen]) {
      const bytes = new Uint8Array(1 << 20).fill(1);
      const item = {
        offset: 0,
        length: bytes.length,
        iv: new Uint8Array(12),
        tag: new Uint8Array(16),
        get aad() {
          structuredClone(bytes.buffer, { transfer: [bytes.buffer as ArrayBuffer] });
          return new Uint8Array(0);
        },
      };
      expect(() => call(key, bytes, [item])).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/runs past the bytes/) }),
      );
      expect(bytes.byteLength).toBe(0);
    }
  });

  it.skipIf(!gcm.gcmAvailable)('uses the iv, aad and tag as they were read, when a later getter detaches them', () => {
    const plain = pattern(1, 11).subarray(0, 4096);
    const bytes = Uint8Array.from(plain);
    const ivBytes = Uint8Array.from({ length: 12 }, (_, i) => i + 1);
    const aadBytes = Uint8Array.from([1, 2, 3, 4]);
    const detach = (...views: Uint8Array[]) =>
      structuredClone(
        views.map((v) => v.buffer),
        { transfer: views.map((v) => v.buffer as ArrayBuffer) },
      );

    // Seal reads offset, length, iv, aad: the aad getter detaches the iv read just before.
    const sealIv = Uint8Array.from(ivBytes);
    const tags = gcm.gcmSeal(key, bytes, [
      {
        offset: 0,
        length: bytes.length,
        iv: sealIv,
        get aad() {
          detach(sealIv);
          return Uint8Array.from(aadBytes);
        },
      },
    ]);
    expect(sealIv.byteLength).toBe(0);
    const cipher = createCipheriv('aes-256-gcm', key, ivBytes);
    cipher.setAAD(aadBytes);
    expect(Buffer.from(bytes).equals(Buffer.concat([cipher.update(plain), cipher.final()]))).toBe(true);
    expect(Buffer.from(tags).equals(cipher.getAuthTag())).toBe(true);

    // Open reads the tag last: its getter detaches the iv and aad read before.
    const openIv = Uint8Array.from(ivBytes);
    const openAad = Uint8Array.from(aadBytes);
    const failed = gcm.gcmOpen(key, bytes, [
      {
        offset: 0,
        length: bytes.length,
        iv: openIv,
        aad: openAad,
        get tag() {
          detach(openIv, openAad);
          return Uint8Array.from(tags);
        },
      },
    ]);
    expect(openIv.byteLength + openAad.byteLength).toBe(0);
    expect(failed).toBe(-1);
    expect(Buffer.from(bytes).equals(Buffer.from(plain))).toBe(true);
  });
});
