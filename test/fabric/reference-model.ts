// A plain reference model of the allocator for the property test: contexts are byte arrays, and blocks
// are abstract objects with a reference count and a fill level, so the model predicts sharing,
// copy-on-write and exhaustion without sharing any code with the implementations it checks.

export interface ModelBlock {
  readonly id: number;
  refs: number;
  fill: number;
}

export interface ModelContext {
  tenant: number;
  bytes: Uint8Array;
  pages: ModelBlock[];
  pins: number;
}

export class ReferenceModel {
  readonly contexts = new Map<number, ModelContext>();
  rawBlocks = 0;
  private nextBlockId = 0;

  constructor(
    readonly totalBlocks: number,
    readonly tokensPerBlock: number,
    readonly bytesPerToken: number,
  ) {}

  tokens(ctx: ModelContext): number {
    return ctx.bytes.length / this.bytesPerToken;
  }

  liveBlocks(): Set<ModelBlock> {
    const blocks = new Set<ModelBlock>();
    for (const ctx of this.contexts.values()) for (const page of ctx.pages) blocks.add(page);
    return blocks;
  }

  freeBlocks(): number {
    return this.totalBlocks - this.liveBlocks().size - this.rawBlocks;
  }

  create(handle: number, tenant: number): void {
    this.contexts.set(handle, { tenant, bytes: new Uint8Array(0), pages: [], pins: 0 });
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
    this.contexts.set(childHandle, { tenant: parent.tenant, bytes: parent.bytes.slice(), pages: [...parent.pages], pins: 0 });
  }

  release(handle: number): void {
    const ctx = this.contexts.get(handle)!;
    for (const page of ctx.pages) page.refs -= 1;
    this.contexts.delete(handle);
  }

  private newBlock(fill: number): ModelBlock {
    return { id: this.nextBlockId++, refs: 1, fill };
  }
}
