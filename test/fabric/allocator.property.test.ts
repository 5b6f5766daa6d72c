// Long random operation sequences against both implementations, checked after every step against
// ReferenceModel: accounting, reference counts versus page tables, bytes, fork isolation, scrubbing,
// and for the native allocator the tiers: demote, promote, spill to a stand-in disk, fill back.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { FabricError, type KvAllocator, type ScrubPolicy, type TierPrimitives } from '../../src/fabric';
import { expectSameBytes, implementations, tinyShape, TINY_BYTES_PER_TOKEN } from './implementations';
import { ReferenceModel, type ModelContext } from './reference-model';

const TOTAL_BLOCKS = 24;
const HOST_BLOCKS = 12;
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
  | { kind: 'useStale'; which: number }
  | { kind: 'demote'; ctx: number }
  | { kind: 'promote'; ctx: number }
  | { kind: 'spill'; ctx: number; drop: boolean }
  | { kind: 'fill'; ctx: number; device: boolean };

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
const tierOpArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('demote' as const), ctx: pick }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('promote' as const), ctx: pick }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('spill' as const), ctx: pick, drop: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('fill' as const), ctx: pick, device: fc.boolean() }) },
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
  readonly model: ReferenceModel;
  readonly handles: number[] = [];
  readonly released: number[] = [];
  readonly rawBatches: Float64Array[] = [];
  /** The stand-in disk tier: disk key -> block bytes. */
  readonly disk = new Map<number, Uint8Array>();
  private nextDiskKey = 1;

  constructor(
    readonly pool: KvAllocator,
    readonly scrub: ScrubPolicy,
    readonly tiers: (KvAllocator & TierPrimitives) | undefined,
  ) {
    this.model = new ReferenceModel(TOTAL_BLOCKS, TPB, TINY_BYTES_PER_TOKEN, tiers ? HOST_BLOCKS : 0);
  }

  /** Pages the token range touches that exist only on disk. */
  private diskOnlyIn(ctx: ModelContext, start: number, count: number): boolean {
    for (let page = Math.floor(start / TPB); page * TPB < start + count; page++) {
      if (ctx.pages[page]!.tier === 'none') return true;
    }
    return false;
  }

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
        if (op.tokens > 0 && !ctx.resident) {
          await expectFabricError(run, 'INVALID_STATE');
        } else if (model.blocksNeeded(ctx, op.tokens) > model.freeBlocks()) {
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
        } else if (this.diskOnlyIn(ctx, start, count)) {
          await expectFabricError(() => pool.read(handle, start, count), 'INVALID_STATE');
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
      default:
        return this.applyTierOp(op);
    }
  }

  private async applyTierOp(op: Op): Promise<void> {
    const { model, tiers } = this;
    if (!tiers || !('ctx' in op)) return;
    const target = this.live(op.ctx);
    if (!target) return;
    const [handle, ctx] = target;
    switch (op.kind) {
      case 'demote': {
        if (!ctx.resident) {
          await expectFabricError(() => tiers.demote(handle), 'INVALID_STATE');
        } else if (model.demotable(ctx).length > model.freeHostBlocks()) {
          await expectFabricError(() => tiers.demote(handle), 'POOL_EXHAUSTED');
        } else {
          await tiers.demote(handle);
          model.demote(ctx);
        }
        return;
      }
      case 'promote': {
        const hostPages = new Set(ctx.pages.filter((b) => b.tier === 'host')).size;
        if (ctx.resident) {
          await tiers.promote(handle);
        } else if (ctx.pages.some((b) => b.tier === 'none')) {
          await expectFabricError(() => tiers.promote(handle), 'INVALID_STATE');
        } else if (hostPages > model.freeBlocks()) {
          await expectFabricError(() => tiers.promote(handle), 'POOL_EXHAUSTED');
        } else {
          await tiers.promote(handle);
          model.promote(ctx);
        }
        return;
      }
      case 'spill': {
        const { lease, blocks } = tiers.beginSpill(handle);
        expect(blocks).toBe(model.spillable(ctx).length);
        const keys: number[] = [];
        for (let i = 0; i < blocks; i++) {
          const key = this.nextDiskKey++;
          this.disk.set(key, tiers.spillRead(lease, i));
          keys.push(key);
        }
        tiers.commitSpill(lease, Float64Array.from(keys), op.drop);
        model.spill(ctx, keys, op.drop);
        return;
      }
      case 'fill': {
        const target = op.device ? 'device' : 'host';
        const wanted = ctx.resident ? 0 : ctx.pages.filter((b) => b.tier === 'none').length;
        if (op.device && !ctx.resident && ctx.pages.some((b) => b.tier === 'host')) {
          await expectFabricError(() => tiers.beginFill(handle, target), 'INVALID_STATE');
          return;
        }
        if (wanted > (op.device ? model.freeBlocks() : model.freeHostBlocks())) {
          await expectFabricError(() => tiers.beginFill(handle, target), 'POOL_EXHAUSTED');
          return;
        }
        const { lease, diskKeys } = tiers.beginFill(handle, target);
        expect(diskKeys.length).toBe(wanted);
        diskKeys.forEach((key, i) => tiers.fillWrite(lease, i, this.disk.get(key)!));
        tiers.commitFill(lease);
        if (!ctx.resident) op.device ? model.fillToDevice(ctx) : model.fill(ctx);
        return;
      }
    }
  }

  /** The allocator reports exactly the disk copies the model says were freed; the stand-in disk drops them. */
  checkFreedDiskKeys(): void {
    if (!this.tiers) return;
    const reported = [...this.tiers.takeFreedDiskKeys()].sort((a, b) => a - b);
    expect(reported).toEqual([...this.model.freedDiskKeys].sort((a, b) => a - b));
    for (const key of reported) this.disk.delete(key);
    this.model.freedDiskKeys = [];
  }

  async checkInvariants(): Promise<void> {
    const { pool, model } = this;
    const stats = pool.stats();
    const blocks = model.liveBlocks();
    expect(stats.freeBlocks + stats.usedBlocks).toBe(stats.totalBlocks);
    expect(stats.freeBlocks).toBe(model.freeBlocks());
    expect(stats.host).toEqual({
      totalBlocks: model.hostBlocks,
      freeBlocks: model.freeHostBlocks(),
      usedBlocks: model.hostBlocks - model.freeHostBlocks(),
    });
    expect(stats.diskOnlyBlocks).toBe(model.diskOnlyBlocks());
    expect(stats.diskCopies).toBe([...blocks].filter((b) => b.diskKey !== 0).length);
    expect(this.disk.size).toBe(stats.diskCopies);
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
      this.checkContext(handle, ctx);
      if (!ctx.resident) {
        await expectFabricError(() => pool.blockTable(handle), 'INVALID_STATE');
        continue;
      }
      const table = pool.blockTable(handle);
      expect(table.length).toBe(ctx.pages.length);
      ctx.pages.forEach((page, i) => {
        const index = table[i]!;
        expect(modelToPool.get(page.id) ?? index).toBe(index);
        expect(poolToModel.get(index) ?? page.id).toBe(page.id);
        modelToPool.set(page.id, index);
        poolToModel.set(index, page.id);
      });
    }
    for (const ctx of model.contexts.values()) {
      for (const page of ctx.pages) occurrences.set(page.id, (occurrences.get(page.id) ?? 0) + 1);
    }
    for (const block of blocks) expect(occurrences.get(block.id)).toBe(block.refs);
  }

  private checkContext(handle: number, ctx: ModelContext): void {
    const { pool, model } = this;
    {
      const tokens = model.tokens(ctx);
      expect(pool.contextStats(handle)).toEqual({
        tenant: ctx.tenant,
        tokens,
        blocks: ctx.pages.length,
        sharedBlocks: ctx.pages.filter((p) => p.refs > 1).length,
        pinCount: ctx.pins,
        bytes: tokens * TINY_BYTES_PER_TOKEN,
        wasteBytes: (ctx.pages.length * TPB - tokens) * TINY_BYTES_PER_TOKEN,
        resident: ctx.resident,
        devicePages: ctx.pages.filter((b) => b.tier === 'device').length,
        hostPages: ctx.pages.filter((b) => b.tier === 'host').length,
        diskOnlyPages: ctx.pages.filter((b) => b.tier === 'none').length,
        diskCopies: ctx.pages.filter((b) => b.diskKey !== 0).length,
      });
      if (this.tiers) {
        expect(this.tiers.pageResidency(handle)).toEqual(ctx.pages.map((b) => (b.tier === 'none' ? 'disk' : b.tier)));
      }
      if (!this.diskOnlyIn(ctx, 0, tokens)) expectSameBytes(pool.read(handle, 0, tokens), ctx.bytes);
      this.checkBlockBytes(handle, ctx);
    }
  }

  /** No byte of another tenant in any block a context can see; under `always`, unfilled slots are zero. */
  private checkBlockBytes(handle: number, ctx: ModelContext): void {
    const { tokenPlaneBytes, planeBytes, planes } = this.pool.layout;
    const tokens = this.model.tokens(ctx);
    ctx.pages.forEach((block, page) => {
      if (block.tier === 'none') return;
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
    for (const handle of this.handles) this.model.release(handle);
    for (const handle of this.handles) this.pool.release(handle);
    for (const batch of this.rawBatches) this.pool.freeBlocks(batch);
    this.checkFreedDiskKeys();
    expect(this.disk.size).toBe(0);
    expect(this.pool.stats()).toMatchObject({
      freeBlocks: TOTAL_BLOCKS,
      usedBlocks: 0,
      sharedBlocks: 0,
      contexts: 0,
      wasteBytes: 0,
      diskOnlyBlocks: 0,
      diskCopies: 0,
    });
    expect(this.pool.stats().host.usedBlocks).toBe(0);
  }
}

describe.each(implementations)('$name allocator against the reference model', ({ name, create }) => {
  const withTiers = name === 'native';
  const ops = withTiers ? fc.oneof({ weight: 4, arbitrary: opArb }, { weight: 1, arbitrary: tierOpArb }) : opArb;
  it.each(['on-tenant-change', 'always'] as const)('holds every invariant under scrub=%s', async (scrub) => {
    await fc.assert(
      fc.asyncProperty(fc.array(ops, { minLength: 20, maxLength: 120 }), async (sequence) => {
        const pool = create({
          shape: tinyShape,
          tokensPerBlock: TPB,
          blockCount: TOTAL_BLOCKS,
          hostBlockCount: withTiers ? HOST_BLOCKS : 0,
          scrub,
        });
        try {
          const harness = new Harness(pool, scrub, withTiers ? (pool as KvAllocator & TierPrimitives) : undefined);
          for (const op of sequence) {
            await harness.apply(op);
            harness.checkFreedDiskKeys();
            await harness.checkInvariants();
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
