// A plain reference model of the allocator for the property test: contexts are byte arrays, and blocks
// are abstract objects with a reference count and a fill level, so the model predicts sharing,
// copy-on-write and exhaustion without sharing any code with the implementations it checks.

export type ModelTier = 'device' | 'host' | 'none';

export interface ModelBlock {
  readonly id: number;
  refs: number;
  fill: number;
  /** Where the bytes are: a device frame, a host frame, or only on disk. */
  tier: ModelTier;
  /** The disk copy's key, 0 when there is none. */
  diskKey: number;
}

export interface ModelContext {
  tenant: number;
  bytes: Uint8Array;
  pages: ModelBlock[];
  pins: number;
  resident: boolean;
}

export class ReferenceModel {
  readonly contexts = new Map<number, ModelContext>();
  rawBlocks = 0;
  /** Disk keys whose blocks were freed or rewritten, as the allocator should report them. */
  freedDiskKeys: number[] = [];
  private nextBlockId = 0;

  constructor(
    readonly totalBlocks: number,
    readonly tokensPerBlock: number,
    readonly bytesPerToken: number,
    readonly hostBlocks = 0,
  ) {}

  tokens(ctx: ModelContext): number {
    return ctx.bytes.length / this.bytesPerToken;
  }

  liveBlocks(): Set<ModelBlock> {
    const blocks = new Set<ModelBlock>();
    for (const ctx of this.contexts.values()) for (const page of ctx.pages) blocks.add(page);
    return blocks;
  }

  private blocksOn(tier: ModelTier): number {
    return [...this.liveBlocks()].filter((b) => b.tier === tier).length;
  }

  /** Free device blocks. */
  freeBlocks(): number {
    return this.totalBlocks - this.blocksOn('device') - this.rawBlocks;
  }

  freeHostBlocks(): number {
    return this.hostBlocks - this.blocksOn('host');
  }

  diskOnlyBlocks(): number {
    return this.blocksOn('none');
  }

  /** Resident contexts that use the block. */
  residentUsers(block: ModelBlock): number {
    let users = 0;
    for (const ctx of this.contexts.values()) if (ctx.resident && ctx.pages.includes(block)) users++;
    return users;
  }

  create(handle: number, tenant: number): void {
    this.contexts.set(handle, { tenant, bytes: new Uint8Array(0), pages: [], pins: 0, resident: true });
  }

  /** Blocks an append of n tokens needs, the copy-on-write block included. */
  blocksNeeded(ctx: ModelContext, n: number): number {
    if (n === 0) return 0;
    const tokens = this.tokens(ctx);
    const partial = tokens % this.tokensPerBlock;
    const last = ctx.pages[ctx.pages.length - 1];
    const cow = partial !== 0 && last !== undefined && last.refs > 1 ? 1 : 0;
    return Math.ceil((tokens + n) / this.tokensPerBlock) - ctx.pages.length + cow;
  }

  append(ctx: ModelContext, kv: Uint8Array): void {
    const n = kv.length / this.bytesPerToken;
    if (n === 0) return;
    let tokens = this.tokens(ctx);
    const partial = tokens % this.tokensPerBlock;
    const last = ctx.pages[ctx.pages.length - 1];
    if (partial !== 0 && last !== undefined && last.refs > 1) {
      last.refs -= 1;
      ctx.pages[ctx.pages.length - 1] = this.newBlock(partial);
    } else if (partial !== 0 && last !== undefined) {
      this.dropDiskCopy(last); // written in place: its disk copy is stale
    }
    for (let i = 0; i < n; i++, tokens++) {
      if (tokens % this.tokensPerBlock === 0) ctx.pages.push(this.newBlock(0));
      const page = ctx.pages[ctx.pages.length - 1]!;
      page.fill = Math.max(page.fill, (tokens % this.tokensPerBlock) + 1);
    }
    const grown = new Uint8Array(ctx.bytes.length + kv.length);
    grown.set(ctx.bytes);
    grown.set(kv, ctx.bytes.length);
    ctx.bytes = grown;
  }

  fork(parentHandle: number, childHandle: number): void {
    const parent = this.contexts.get(parentHandle)!;
    for (const page of parent.pages) page.refs += 1;
    this.contexts.set(childHandle, {
      tenant: parent.tenant,
      bytes: parent.bytes.slice(),
      pages: [...parent.pages],
      pins: 0,
      resident: parent.resident,
    });
  }

  release(handle: number): void {
    const ctx = this.contexts.get(handle)!;
    for (const page of ctx.pages) {
      page.refs -= 1;
      if (page.refs === 0) this.dropDiskCopy(page);
    }
    this.contexts.delete(handle);
  }

  /** Device blocks only this resident context uses: the ones a demote moves to the host. */
  demotable(ctx: ModelContext): ModelBlock[] {
    return ctx.pages.filter((b) => b.tier === 'device' && this.residentUsers(b) === 1);
  }

  demote(ctx: ModelContext): void {
    for (const b of this.demotable(ctx)) b.tier = 'host';
    ctx.resident = false;
  }

  promote(ctx: ModelContext): void {
    for (const b of ctx.pages) if (b.tier === 'host') b.tier = 'device';
    ctx.resident = true;
  }

  /** Blocks of the context without a disk copy, in page order: what a spill writes. */
  spillable(ctx: ModelContext): ModelBlock[] {
    return ctx.pages.filter((b) => b.diskKey === 0);
  }

  spill(ctx: ModelContext, keys: number[], dropHostFrames: boolean): void {
    this.spillable(ctx).forEach((b, i) => (b.diskKey = keys[i]!));
    if (dropHostFrames && !ctx.resident) for (const b of ctx.pages) if (b.tier === 'host') b.tier = 'none';
  }

  fill(ctx: ModelContext): void {
    for (const b of ctx.pages) if (b.tier === 'none') b.tier = 'host';
  }

  /** A fill straight to the device (no host pages): every page is on the device, the context resident. */
  fillToDevice(ctx: ModelContext): void {
    for (const b of ctx.pages) if (b.tier === 'none') b.tier = 'device';
    ctx.resident = true;
  }

  private dropDiskCopy(block: ModelBlock): void {
    if (block.diskKey !== 0) this.freedDiskKeys.push(block.diskKey);
    block.diskKey = 0;
  }

  private newBlock(fill: number): ModelBlock {
    return { id: this.nextBlockId++, refs: 1, fill, tier: 'device', diskKey: 0 };
  }
}
