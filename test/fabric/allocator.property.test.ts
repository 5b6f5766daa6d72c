// Long random operation sequences against both implementations, checked after every step against
// ReferenceModel: accounting, reference counts versus page tables, bytes, fork isolation, scrubbing.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { FabricError, type KvAllocator, type ScrubPolicy } from '../../src/fabric';
import { expectSameBytes, implementations, tinyShape, TINY_BYTES_PER_TOKEN } from './implementations';
import { ReferenceModel, type ModelContext } from './reference-model';

const TOTAL_BLOCKS = 24;
const TPB = 4;
const TENANTS = [1, 2, 3];

/** Bytes a tenant writes are tagged: every value v has v % 4 === tenant, so stray bytes are attributable. */
function taggedBytes(tenant: number, tokens: number, seed: number): Uint8Array {
  const out = new Uint8Array(tokens * TINY_BYTES_PER_TOKEN);
  for (let i = 0; i < out.length; i++) out[i] = ((seed + i * 13) % 63) * 4 + tenant;
  return out;
}

type Op =
  | { kind: 'create'; tenant: number }
  | { kind: 'append'; ctx: number; tokens: number; seed: number; async: boolean }
  | { kind: 'badAppend'; ctx: number }
  | { kind: 'read'; ctx: number; start: number; count: number }
  | { kind: 'fork'; ctx: number }
  | { kind: 'release'; ctx: number }
  | { kind: 'pin'; ctx: number }
  | { kind: 'unpin'; ctx: number }
  | { kind: 'allocRaw'; tenant: number; count: number }
  | { kind: 'freeRaw'; batch: number }
  | { kind: 'useStale'; which: number };

const pick = fc.nat({ max: 1000 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('create' as const), tenant: fc.constantFrom(...TENANTS) }) },
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('append' as const),
      ctx: pick,
      tokens: fc.nat({ max: 3 * TPB + 1 }),
      seed: fc.nat({ max: 255 }),
      async: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('badAppend' as const), ctx: pick }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('read' as const), ctx: pick, start: pick, count: pick }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('fork' as const), ctx: pick }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('release' as const), ctx: pick }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('pin' as const), ctx: pick }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('unpin' as const), ctx: pick }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('allocRaw' as const),
      tenant: fc.constantFrom(...TENANTS),
      count: fc.nat({ max: 6 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('freeRaw' as const), batch: pick }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('useStale' as const), which: pick }) },
);

async function expectFabricError(action: () => unknown, code: string): Promise<void> {
  try {
    await action();
  } catch (err) {
    expect(err).toBeInstanceOf(FabricError);
    expect((err as FabricError).code).toBe(code);
    return;
  }
  throw new Error(`expected ${code}`);
}

class Harness {
  readonly model = new ReferenceModel(TOTAL_BLOCKS, TPB, TINY_BYTES_PER_TOKEN);
  readonly handles: number[] = [];
  readonly released: number[] = [];
  readonly rawBatches: Float64Array[] = [];

  constructor(
    readonly pool: KvAllocator,
    readonly scrub: ScrubPolicy,
  ) {}

  private live(index: number): [number, ModelContext] | undefined {
    if (this.handles.length === 0) return undefined;
    const handle = this.handles[index % this.handles.length]!;
    return [handle, this.model.contexts.get(handle)!];
  }

  async apply(op: Op): Promise<void> {
    const { pool, model } = this;
    switch (op.kind) {
      case 'create': {
        const handle = pool.createContext(op.tenant);
        model.create(handle, op.tenant);
        this.handles.push(handle);
        return;
      }
      case 'append': {
        const target = this.live(op.ctx);
        if (!target) return;
        const [handle, ctx] = target;
        const kv = taggedBytes(ctx.tenant, op.tokens, op.seed);
        const run = () => (op.async ? pool.appendAsync(handle, kv) : pool.append(handle, kv));
        if (model.blocksNeeded(ctx, op.tokens) > model.freeBlocks()) {
          await expectFabricError(run, 'POOL_EXHAUSTED');
        } else {
          await run();
          model.append(ctx, kv);
        }
        return;
      }
      case 'badAppend': {
        const target = this.live(op.ctx);
        if (target) await expectFabricError(() => pool.append(target[0], new Uint8Array(TINY_BYTES_PER_TOKEN - 1)), 'INVALID_ARGUMENT');
        return;
      }
      case 'read': {
        const target = this.live(op.ctx);
        if (!target) return;
        const [handle, ctx] = target;
        const tokens = model.tokens(ctx);
        const start = op.start % (tokens + 2);
        const count = op.count % (tokens + 2);
        if (start + count > tokens) {
          await expectFabricError(() => pool.read(handle, start, count), 'OUT_OF_RANGE');
        } else {
          const bytes = ctx.bytes.subarray(start * TINY_BYTES_PER_TOKEN, (start + count) * TINY_BYTES_PER_TOKEN);
          expectSameBytes(pool.read(handle, start, count), bytes);
        }
        return;
      }
      case 'fork': {
        const target = this.live(op.ctx);
        if (!target) return;
        const child = pool.fork(target[0]);
        model.fork(target[0], child);
        this.handles.push(child);
        return;
      }
      case 'release': {
        const target = this.live(op.ctx);
        if (!target) return;
        pool.release(target[0]);
        model.release(target[0]);
        this.handles.splice(this.handles.indexOf(target[0]), 1);
        this.released.push(target[0]);
        return;
      }
      case 'pin': {
        const target = this.live(op.ctx);
        if (!target) return;
        pool.pin(target[0]);
        target[1].pins += 1;
        return;
      }
      case 'unpin': {
        const target = this.live(op.ctx);
        if (!target) return;
        if (target[1].pins === 0) {
          await expectFabricError(() => pool.unpin(target[0]), 'INVALID_STATE');
        } else {
          pool.unpin(target[0]);
          target[1].pins -= 1;
        }
        return;
      }
      case 'allocRaw': {
        if (op.count > model.freeBlocks()) {
          await expectFabricError(() => pool.allocateBlocks(op.tenant, op.count), 'POOL_EXHAUSTED');
        } else {
          this.rawBatches.push(pool.allocateBlocks(op.tenant, op.count));
          model.rawBlocks += op.count;
        }
        return;
      }
      case 'freeRaw': {
        if (this.rawBatches.length === 0) return;
        const [batch] = this.rawBatches.splice(op.batch % this.rawBatches.length, 1);
        pool.freeBlocks(batch!);
        model.rawBlocks -= batch!.length;
        if (batch!.length > 0) await expectFabricError(() => pool.freeBlocks(batch!.subarray(0, 1)), 'STALE_HANDLE');
        return;
      }
      case 'useStale': {
        if (this.released.length === 0) return;
        const stale = this.released[op.which % this.released.length]!;
        await expectFabricError(() => pool.read(stale, 0, 0), 'STALE_HANDLE');
        await expectFabricError(() => pool.append(stale, taggedBytes(1, 1, 0)), 'STALE_HANDLE');
        return;
      }
    }
  }

  checkInvariants(): void {
    const { pool, model } = this;
    const stats = pool.stats();
    const blocks = model.liveBlocks();
    expect(stats.freeBlocks + stats.usedBlocks).toBe(stats.totalBlocks);
    expect(stats.usedBlocks).toBe(blocks.size + model.rawBlocks);
    expect(stats.sharedBlocks).toBe([...blocks].filter((b) => b.refs > 1).length);
    expect(stats.contexts).toBe(model.contexts.size);
    let waste = 0;
    for (const block of blocks) waste += (TPB - block.fill) * TINY_BYTES_PER_TOKEN;
    expect(stats.wasteBytes).toBe(waste);

    // Reference counts against page tables: model block <-> pool block must be a bijection, and
    // every model block's refs must equal the number of page tables that hold it.
    const modelToPool = new Map<number, number>();
    const poolToModel = new Map<number, number>();
    const occurrences = new Map<number, number>();
    for (const [handle, ctx] of model.contexts) {
      const table = pool.blockTable(handle);
      expect(table.length).toBe(ctx.pages.length);
      ctx.pages.forEach((page, i) => {
        const index = table[i]!;
        expect(modelToPool.get(page.id) ?? index).toBe(index);
        expect(poolToModel.get(index) ?? page.id).toBe(page.id);
        modelToPool.set(page.id, index);
        poolToModel.set(index, page.id);
        occurrences.set(page.id, (occurrences.get(page.id) ?? 0) + 1);
      });
      const tokens = model.tokens(ctx);
      expect(pool.contextStats(handle)).toEqual({
        tenant: ctx.tenant,
        tokens,
        blocks: ctx.pages.length,
        sharedBlocks: ctx.pages.filter((p) => p.refs > 1).length,
        pinCount: ctx.pins,
        bytes: tokens * TINY_BYTES_PER_TOKEN,
        wasteBytes: (ctx.pages.length * TPB - tokens) * TINY_BYTES_PER_TOKEN,
        resident: true,
        devicePages: ctx.pages.length,
        hostPages: 0,
        diskOnlyPages: 0,
        diskCopies: 0,
      });
      expectSameBytes(pool.read(handle, 0, tokens), ctx.bytes);
      this.checkBlockBytes(handle, ctx);
    }
    for (const block of blocks) expect(occurrences.get(block.id)).toBe(block.refs);
  }

  /** No byte of another tenant in any block a context can see; under `always`, unfilled slots are zero. */
  private checkBlockBytes(handle: number, ctx: ModelContext): void {
    const { tokenPlaneBytes, planeBytes, planes } = this.pool.layout;
    const tokens = this.model.tokens(ctx);
    ctx.pages.forEach((_, page) => {
      const raw = this.pool.readBlock(handle, page);
      for (const byte of raw) {
        if (byte !== 0 && byte % 4 !== ctx.tenant) throw new Error(`tenant ${ctx.tenant} sees byte ${byte} of another tenant`);
      }
      if (this.scrub === 'always') {
        const filled = Math.min(TPB, tokens - page * TPB);
        for (let plane = 0; plane < planes; plane++) {
          const unfilled = raw.subarray(plane * planeBytes + filled * tokenPlaneBytes, (plane + 1) * planeBytes);
          if (unfilled.some((byte) => byte !== 0)) throw new Error(`unfilled slots of page ${page} hold old bytes`);
        }
      }
    });
  }

  releaseAll(): void {
    for (const handle of this.handles) this.pool.release(handle);
    for (const batch of this.rawBatches) this.pool.freeBlocks(batch);
    expect(this.pool.stats()).toMatchObject({ freeBlocks: TOTAL_BLOCKS, usedBlocks: 0, sharedBlocks: 0, contexts: 0, wasteBytes: 0 });
  }
}

describe.each(implementations)('$name allocator against the reference model', ({ create }) => {
  it.each(['on-tenant-change', 'always'] as const)('holds every invariant under scrub=%s', async (scrub) => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 20, maxLength: 120 }), async (ops) => {
        const pool = create({ shape: tinyShape, tokensPerBlock: TPB, blockCount: TOTAL_BLOCKS, scrub });
        try {
          const harness = new Harness(pool, scrub);
          for (const op of ops) {
            await harness.apply(op);
            harness.checkInvariants();
          }
          harness.releaseAll();
        } finally {
          pool.close();
        }
      }),
      { numRuns: 150 },
    );
  });
});
