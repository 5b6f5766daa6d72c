// TsAllocator: a pure TypeScript KvAllocator following docs/allocator.md. It is the baseline in benchmarks
// and a second implementation under the native allocator's test suite, so its observable behaviour (error
// codes and their order, all-or-nothing failures, statistics, byte layout, scrubbing, block reuse order,
// handle values) must match the native one exactly.
//
// Single-threaded: every call runs to completion, so no operation is ever in flight during another and BUSY
// never occurs. Block metadata lives in typed arrays indexed by block (no per-block objects); typed-array
// reads carry `!` because noUncheckedIndexedAccess cannot see that indices are in range by construction.

import { FabricError } from '../../src/fabric/errors';
import { computeLayout, validatePoolOptions } from '../../src/fabric/layout';
import type {
  BlockLayout,
  ContextHandle,
  ContextStats,
  KvAllocator,
  PoolOptions,
  PoolStats,
  ScrubPolicy,
  TenantId,
} from '../../src/fabric/types';

const HANDLE_SLOT_SPAN = 2 ** 32;
/** Largest generation whose handles (generation * 2^32 + index) stay exact JS numbers. */
const MAX_GENERATION = 2 ** 21 - 1;
const MAX_TENANT = 2 ** 32 - 1;
/** Page tables start this small and double, since most contexts in a benchmark are short. */
const INITIAL_PAGES = 4;

interface Context {
  tenant: number;
  tokens: number;
  /** Block indices; only the first pageCount entries are meaningful. */
  pages: Uint32Array;
  pageCount: number;
  pins: number;
}

function invalid(message: string): FabricError {
  return new FabricError('INVALID_ARGUMENT', message);
}

/** Counts, indices and handles: a handle's range is checked later, as STALE_HANDLE. */
function requireIndex(value: unknown, name: string): number {
  if (!Number.isSafeInteger(value) || (value as number) < 0) {
    throw invalid(`${name} must be a non-negative integer`);
  }
  return value as number;
}

function requireTenant(value: unknown): number {
  if (!Number.isSafeInteger(value) || (value as number) < 1 || (value as number) > MAX_TENANT) {
    throw invalid(`tenant must be an integer in [1, ${MAX_TENANT}]`);
  }
  return value as number;
}

export class TsAllocator implements KvAllocator {
  readonly layout: BlockLayout;
  readonly scrubPolicy: ScrubPolicy;

  private readonly blockCount: number;
  private readonly hostBlockCount: number;
  private readonly maxContexts: number;
  private closed = false;

  private store: Uint8Array;
  // Per-block metadata (docs/allocator.md, "Per block"). There is no `readers` count: reads complete
  // synchronously, so no block can be freed under a reader here.
  private refs: Uint32Array;
  private generation: Uint32Array;
  /** Owner while used, last owner while free, 0 = clean (all zero bytes). */
  private tenant: Uint32Array;
  private fill: Uint32Array;
  /** 1 for engine blocks from allocateBlocks, which freeBlocks may free and contexts never hold. */
  private raw: Uint8Array;
  /** LIFO stack of free block indices; freeStack[freeTop - 1] is handed out next. */
  private freeStack: Uint32Array;
  private freeTop: number;

  // Counters that keep stats() O(1).
  private sharedCount = 0;
  /** Sum of fill over used blocks. */
  private usedFill = 0;

  private contexts: (Context | undefined)[] = [];
  /** Current generation per context slot: the live context's, or the next one's while the slot is free. */
  private contextGeneration: number[] = [];
  private freeSlots: number[] = [];
  private liveContexts = 0;

  constructor(options: PoolOptions) {
    const opts = validatePoolOptions(options);
    // The environment's KVFABRIC_BACKEND is for NativeAllocator; only an explicit `cuda` is refused here.
    if (opts.backend === 'cuda') {
      throw new FabricError('UNAVAILABLE', 'TsAllocator runs on the CPU only; use NativeAllocator for backend cuda');
    }
    this.layout = computeLayout(opts.shape, opts.tokensPerBlock);
    this.scrubPolicy = opts.scrub;
    this.blockCount = opts.blockCount;
    this.hostBlockCount = opts.hostBlockCount;
    this.maxContexts = opts.maxContexts;

    const n = opts.blockCount;
    try {
      // Fresh typed arrays are zero: fresh blocks are zero and clean (tenant 0).
      this.store = new Uint8Array(n * this.layout.blockBytes);
      this.refs = new Uint32Array(n);
      this.generation = new Uint32Array(n).fill(1);
      this.tenant = new Uint32Array(n);
      this.fill = new Uint32Array(n);
      this.raw = new Uint8Array(n);
      this.freeStack = new Uint32Array(n);
    } catch (err) {
      if (err instanceof RangeError) {
        throw new FabricError('OUT_OF_MEMORY', `cannot allocate ${n} blocks of ${this.layout.blockBytes} bytes`);
      }
      throw err;
    }
    // Reverse order so block 0 sits on top of the stack and is handed out first.
    for (let i = 0; i < n; i++) this.freeStack[i] = n - 1 - i;
    this.freeTop = n;
  }

  // ---- contexts ----

  createContext(tenant: TenantId): ContextHandle {
    this.checkOpen();
    const t = requireTenant(tenant);
    return this.newContext({ tenant: t, tokens: 0, pages: new Uint32Array(INITIAL_PAGES), pageCount: 0, pins: 0 });
  }

  append(ctx: ContextHandle, kv: Uint8Array): void {
    this.checkOpen();
    const handle = requireIndex(ctx, 'ctx');
    if (!(kv instanceof Uint8Array)) throw invalid('kv must be a Uint8Array');
    const { bytesPerToken, tokensPerBlock: tpb, blockBytes } = this.layout;
    if (kv.length % bytesPerToken !== 0) {
      throw invalid(`kv length ${kv.length} is not a multiple of bytesPerToken ${bytesPerToken}`);
    }
    const c = this.context(handle);
    const n = kv.length / bytesPerToken;
    if (n === 0) return;

    const oldTokens = c.tokens;
    const newTokens = oldTokens + n;
    const firstPage = Math.floor(oldTokens / tpb);
    // A partly filled last page that other contexts share must be copied before we write into it.
    const cow = oldTokens % tpb !== 0 && this.refs[c.pages[firstPage]!]! > 1;
    const newPages = Math.ceil(newTokens / tpb) - c.pageCount;
    if (newPages + (cow ? 1 : 0) > this.freeTop) {
      throw new FabricError('POOL_EXHAUSTED', `append needs ${newPages + (cow ? 1 : 0)} blocks, ${this.freeTop} free`);
    }
    // Nothing below can fail, so the call is all or nothing.

    if (cow) {
      const old = c.pages[firstPage]!;
      // The whole block is overwritten by the copy, so scrubbing it first would be wasted work.
      const fresh = this.takeBlock(c.tenant, false);
      this.store.copyWithin(fresh * blockBytes, old * blockBytes, (old + 1) * blockBytes);
      this.setFill(fresh, this.fill[old]!);
      c.pages[firstPage] = fresh;
      this.dropRef(old);
    }
    this.ensurePageCapacity(c, c.pageCount + newPages);
    for (let i = 0; i < newPages; i++) {
      c.pages[c.pageCount++] = this.takeBlock(c.tenant, true);
    }

    this.copyTokens(c, kv, oldTokens, n, true);
    const lastPage = Math.floor((newTokens - 1) / tpb);
    for (let page = firstPage; page <= lastPage; page++) {
      this.setFill(c.pages[page]!, Math.min(tpb, newTokens - page * tpb));
    }
    c.tokens = newTokens;
  }

  async appendAsync(ctx: ContextHandle, kv: Uint8Array): Promise<void> {
    this.append(ctx, kv);
  }

  read(ctx: ContextHandle, startToken: number, tokenCount: number): Uint8Array {
    this.checkOpen();
    const handle = requireIndex(ctx, 'ctx');
    const start = requireIndex(startToken, 'startToken');
    const count = requireIndex(tokenCount, 'tokenCount');
    const c = this.context(handle);
    if (start + count > c.tokens) {
      throw new FabricError('OUT_OF_RANGE', `tokens [${start}, ${start + count}) exceed context length ${c.tokens}`);
    }
    let out: Uint8Array;
    try {
      out = new Uint8Array(count * this.layout.bytesPerToken);
    } catch (err) {
      if (err instanceof RangeError) throw new FabricError('OUT_OF_MEMORY', `cannot allocate a ${count}-token read`);
      throw err;
    }
    this.copyTokens(c, out, start, count, false);
    return out;
  }

  async readAsync(ctx: ContextHandle, startToken: number, tokenCount: number): Promise<Uint8Array> {
    return this.read(ctx, startToken, tokenCount);
  }

  readBlock(ctx: ContextHandle, pageIndex: number): Uint8Array {
    this.checkOpen();
    const handle = requireIndex(ctx, 'ctx');
    const page = requireIndex(pageIndex, 'pageIndex');
    const c = this.context(handle);
    if (page >= c.pageCount) {
      throw new FabricError('OUT_OF_RANGE', `page ${page} out of range, context has ${c.pageCount} pages`);
    }
    const { blockBytes } = this.layout;
    const start = c.pages[page]! * blockBytes;
    return this.store.slice(start, start + blockBytes);
  }

  fork(ctx: ContextHandle): ContextHandle {
    this.checkOpen();
    const handle = requireIndex(ctx, 'ctx');
    const c = this.context(handle);
    // newContext is the only step that can fail, so take the references after it.
    const forked = this.newContext({
      tenant: c.tenant,
      tokens: c.tokens,
      pages: c.pages.slice(0, Math.max(c.pageCount, INITIAL_PAGES)),
      pageCount: c.pageCount,
      pins: 0,
    });
    for (let i = 0; i < c.pageCount; i++) {
      const b = c.pages[i]!;
      const r = this.refs[b]! + 1;
      this.refs[b] = r;
      if (r === 2) this.sharedCount++;
    }
    return forked;
  }

  pin(ctx: ContextHandle): void {
    this.checkOpen();
    this.context(requireIndex(ctx, 'ctx')).pins++;
  }

  unpin(ctx: ContextHandle): void {
    this.checkOpen();
    const c = this.context(requireIndex(ctx, 'ctx'));
    if (c.pins === 0) throw new FabricError('INVALID_STATE', 'unpin of a context that is not pinned');
    c.pins--;
  }

  release(ctx: ContextHandle): void {
    this.checkOpen();
    const handle = requireIndex(ctx, 'ctx');
    const c = this.context(handle);
    // Page order: the last page's block, if freed, ends on top of the free stack.
    for (let i = 0; i < c.pageCount; i++) this.dropRef(c.pages[i]!);
    const slot = handle % HANDLE_SLOT_SPAN;
    this.contexts[slot] = undefined;
    this.liveContexts--;
    const next = this.contextGeneration[slot]! + 1;
    this.contextGeneration[slot] = next;
    // A slot whose generations are used up is retired rather than wrapped, so a released handle can never
    // become valid again.
    if (next <= MAX_GENERATION) this.freeSlots.push(slot);
  }

  blockTable(ctx: ContextHandle): Uint32Array {
    this.checkOpen();
    const c = this.context(requireIndex(ctx, 'ctx'));
    return c.pages.slice(0, c.pageCount);
  }

  // ---- statistics ----

  stats(): PoolStats {
    this.checkOpen();
    const { blockBytes, tokensPerBlock, bytesPerToken } = this.layout;
    const used = this.blockCount - this.freeTop;
    return {
      totalBlocks: this.blockCount,
      freeBlocks: this.freeTop,
      usedBlocks: used,
      sharedBlocks: this.sharedCount,
      blockBytes,
      totalBytes: this.blockCount * blockBytes,
      usedBytes: used * blockBytes,
      freeBytes: this.freeTop * blockBytes,
      contexts: this.liveContexts,
      wasteBytes: (used * tokensPerBlock - this.usedFill) * bytesPerToken,
      // No tiers here: the host tier is reported empty and nothing is ever on disk.
      host: { totalBlocks: this.hostBlockCount, freeBlocks: this.hostBlockCount, usedBlocks: 0 },
      diskOnlyBlocks: 0,
      diskCopies: 0,
    };
  }

  contextStats(ctx: ContextHandle): ContextStats {
    this.checkOpen();
    const c = this.context(requireIndex(ctx, 'ctx'));
    const { tokensPerBlock, bytesPerToken } = this.layout;
    let shared = 0;
    for (let i = 0; i < c.pageCount; i++) {
      if (this.refs[c.pages[i]!]! > 1) shared++;
    }
    return {
      tenant: c.tenant,
      tokens: c.tokens,
      blocks: c.pageCount,
      sharedBlocks: shared,
      pinCount: c.pins,
      bytes: c.tokens * bytesPerToken,
      wasteBytes: (c.pageCount * tokensPerBlock - c.tokens) * bytesPerToken,
      resident: true,
      devicePages: c.pageCount,
      hostPages: 0,
      diskOnlyPages: 0,
      diskCopies: 0,
    };
  }

  // ---- engine-managed raw blocks ----

  allocateBlocks(tenant: TenantId, count: number): Float64Array {
    this.checkOpen();
    const t = requireTenant(tenant);
    const n = requireIndex(count, 'count');
    if (n > this.freeTop) {
      throw new FabricError('POOL_EXHAUSTED', `requested ${n} blocks, ${this.freeTop} free`);
    }
    const handles = new Float64Array(n);
    const tpb = this.layout.tokensPerBlock;
    for (let i = 0; i < n; i++) {
      const b = this.takeBlock(t, true);
      this.raw[b] = 1;
      // Raw blocks count as full: the engine owns their contents.
      this.setFill(b, tpb);
      handles[i] = this.generation[b]! * HANDLE_SLOT_SPAN + b;
    }
    return handles;
  }

  freeBlocks(handles: Float64Array): void {
    this.checkOpen();
    if (!(handles instanceof Float64Array)) throw invalid('handles must be a Float64Array');
    // Two passes so every INVALID_ARGUMENT outranks any STALE_HANDLE, then nothing is freed unless all pass.
    for (const h of handles) {
      if (!Number.isSafeInteger(h) || h < 0) throw invalid('block handles must be non-negative integers');
      const b = this.liveBlock(h);
      if (b >= 0 && this.raw[b] === 0) throw invalid(`block handle ${h} belongs to a context, not allocateBlocks`);
    }
    const seen = new Set<number>();
    for (const h of handles) {
      const b = this.liveBlock(h);
      if (b < 0) throw new FabricError('STALE_HANDLE', `block handle ${h} is not a live block`);
      if (seen.has(b)) throw new FabricError('STALE_HANDLE', `block handle ${h} appears more than once`);
      seen.add(b);
    }
    for (const h of handles) this.dropRef(h % HANDLE_SLOT_SPAN);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    // Drop the backing store and metadata so the memory can be collected even if this object lingers.
    this.store = new Uint8Array(0);
    this.refs = this.generation = this.tenant = this.fill = this.freeStack = new Uint32Array(0);
    this.raw = new Uint8Array(0);
    this.freeTop = 0;
    this.contexts = [];
    this.contextGeneration = [];
    this.freeSlots = [];
    this.liveContexts = 0;
  }

  // ---- internals ----

  private checkOpen(): void {
    if (this.closed) throw new FabricError('INVALID_STATE', 'allocator is closed');
  }

  private contextsExhausted(): FabricError {
    return new FabricError('POOL_EXHAUSTED', `${this.maxContexts} contexts are live`);
  }

  /** Looks up a syntactically valid context handle; STALE_HANDLE when unknown or released. */
  private context(handle: number): Context {
    const slot = handle % HANDLE_SLOT_SPAN;
    const gen = (handle - slot) / HANDLE_SLOT_SPAN;
    const c = this.contexts[slot];
    if (c === undefined || this.contextGeneration[slot] !== gen) {
      throw new FabricError('STALE_HANDLE', `context handle ${handle} is unknown or released`);
    }
    return c;
  }

  private newContext(c: Context): ContextHandle {
    if (this.liveContexts >= this.maxContexts) throw this.contextsExhausted();
    let slot = this.freeSlots.pop();
    if (slot === undefined) {
      slot = this.contexts.length;
      // Only reachable after ~2^21 releases retire each of ~2^24 slots; keeps slot < 2^32 regardless.
      if (slot >= HANDLE_SLOT_SPAN) throw this.contextsExhausted();
      this.contexts.push(undefined);
      this.contextGeneration.push(1);
    }
    this.contexts[slot] = c;
    this.liveContexts++;
    return this.contextGeneration[slot]! * HANDLE_SLOT_SPAN + slot;
  }

  /** Index of the used block a block handle names, or -1 when the handle is stale. */
  private liveBlock(handle: number): number {
    const b = handle % HANDLE_SLOT_SPAN;
    const gen = (handle - b) / HANDLE_SLOT_SPAN;
    if (b >= this.blockCount || this.refs[b] === 0 || this.generation[b] !== gen) return -1;
    return b;
  }

  /**
   * Pops a free block for `tenant` with refs 1 and fill 0. The caller has checked one is free. `scrub`
   * false skips zeroing when the caller overwrites the whole block anyway.
   */
  private takeBlock(tenant: number, scrub: boolean): number {
    const b = this.freeStack[--this.freeTop]!;
    const last = this.tenant[b]!;
    // Zeroed when handed out again, as the native pool does: under 'always' whatever a context left, under
    // 'on-tenant-change' only another tenant's bytes.
    if (scrub && last !== 0 && (this.scrubPolicy === 'always' || last !== tenant)) {
      const start = b * this.layout.blockBytes;
      this.store.fill(0, start, start + this.layout.blockBytes);
    }
    this.tenant[b] = tenant;
    this.refs[b] = 1;
    this.fill[b] = 0;
    return b;
  }

  private setFill(b: number, fill: number): void {
    this.usedFill += fill - this.fill[b]!;
    this.fill[b] = fill;
  }

  private dropRef(b: number): void {
    const r = this.refs[b]! - 1;
    this.refs[b] = r;
    if (r === 1) this.sharedCount--;
    if (r === 0) this.freeBlock(b);
  }

  private freeBlock(b: number): void {
    this.usedFill -= this.fill[b]!;
    this.fill[b] = 0;
    this.raw[b] = 0;
    const gen = this.generation[b]! + 1;
    // Block handles wrap rather than retire blocks, which would shrink the pool; see MAX_GENERATION.
    this.generation[b] = gen > MAX_GENERATION ? 1 : gen;
    // tenant[b] stays as the last owner, for the lazy scrub in takeBlock.
    this.freeStack[this.freeTop++] = b;
  }

  private ensurePageCapacity(c: Context, pages: number): void {
    if (pages <= c.pages.length) return;
    const grown = new Uint32Array(Math.max(pages, c.pages.length * 2));
    grown.set(c.pages.subarray(0, c.pageCount));
    c.pages = grown;
  }

  /**
   * Copies `count` tokens starting at context token `first` between token-major `buf` and the blocks:
   * into the blocks when `toBlocks`, else out of them. For each token, plane p's tokenPlaneBytes sit at
   * p * planeBytes + slot * tokenPlaneBytes in the token's block.
   */
  private copyTokens(c: Context, buf: Uint8Array, first: number, count: number, toBlocks: boolean): void {
    const { tokensPerBlock: tpb, blockBytes, planes, planeBytes, tokenPlaneBytes } = this.layout;
    const store = this.store;
    let src = 0;
    for (let t = first; t < first + count; t++) {
      const page = Math.floor(t / tpb);
      let at = c.pages[page]! * blockBytes + (t - page * tpb) * tokenPlaneBytes;
      for (let p = 0; p < planes; p++) {
        if (toBlocks) store.set(buf.subarray(src, src + tokenPlaneBytes), at);
        else buf.set(store.subarray(at, at + tokenPlaneBytes), src);
        src += tokenPlaneBytes;
        at += planeBytes;
      }
    }
  }
}
