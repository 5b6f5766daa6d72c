// Pool option validation and block layout arithmetic, shared by NativeAllocator and its test twin
// (test/fabric/ts-allocator.ts) so both reject exactly the same options (docs/allocator.md, "Pool")
// before any memory is reserved.

import { FabricError } from './errors';
import type { Backend, BlockLayout, ModelShape, PoolOptions, ScrubPolicy } from './types';

export const DEFAULT_TOKENS_PER_BLOCK = 16;
export const DEFAULT_MAX_CONTEXTS = 2 ** 20;
export const MAX_CONTEXTS_LIMIT = 2 ** 24;
/** 2^32 - 1 is left out so a block index always fits a uint32 with a spare sentinel value. */
export const MAX_BLOCK_COUNT = 2 ** 32 - 2;
export const MAX_BYTES_PER_TOKEN = 2 ** 30;
export const MAX_BLOCK_BYTES = 2 ** 31;
/** No context ever sees another's released bytes, its own tenant's included (docs/allocator.md#scrubbing). */
export const DEFAULT_SCRUB_POLICY: ScrubPolicy = 'always';

/** PoolOptions with defaults applied; `shape` is a private copy so later caller edits cannot reach it. */
export interface NormalizedPoolOptions {
  shape: ModelShape;
  blockCount: number;
  hostBlockCount: number;
  tokensPerBlock: number;
  scrub: ScrubPolicy;
  maxContexts: number;
  backend: Backend;
  device: number;
  deviceMemoryFraction?: number;
  verifyMoves: boolean;
}

export const BACKENDS: readonly Backend[] = ['auto', 'cpu', 'cuda'];
export const MAX_DEVICE_INDEX = 1023;

/** A backend name from options or the environment; INVALID_ARGUMENT naming where it came from otherwise. */
export function requireBackend(value: unknown, source: string): Backend {
  if (!BACKENDS.includes(value as Backend)) {
    throw invalid(`${source} must be 'auto', 'cpu' or 'cuda', got ${describe(value)}`);
  }
  return value as Backend;
}

function invalid(message: string): FabricError {
  return new FabricError('INVALID_ARGUMENT', message);
}

/** Names a bad value without calling its toString, which plain-JS callers could make throw. */
function describe(value: unknown): string {
  if (typeof value === 'number') return String(value);
  if (typeof value === 'string') return JSON.stringify(value);
  return value === null ? 'null' : typeof value;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** Integer in [min, max]; isSafeInteger also rejects non-numbers, NaN and infinities. */
function requireInt(value: unknown, name: string, min: number, max: number): number {
  if (!Number.isSafeInteger(value) || (value as number) < min || (value as number) > max) {
    throw invalid(`${name} must be an integer in [${min}, ${max}], got ${describe(value)}`);
  }
  return value as number;
}

/** Bytes of one token's KV: layers x (K and V) x kvHeads x headDim x dtypeBytes. Fields are not checked. */
export function bytesPerTokenOf(shape: ModelShape): number {
  return shape.layers * 2 * shape.kvHeads * shape.headDim * shape.dtypeBytes;
}

/**
 * The layout of one block for `shape`, after checking every field (callers may be plain JS).
 * Throws INVALID_ARGUMENT when a field is not an integer >= 1 or the per-token / per-block sizes exceed
 * their limits.
 */
export function computeLayout(shape: ModelShape, tokensPerBlock: number): BlockLayout {
  if (!isObject(shape)) throw invalid('shape must be an object');
  // The upper bound only keeps the arithmetic exact; the byte limits below are the real constraint.
  const layers = requireInt(shape.layers, 'shape.layers', 1, Number.MAX_SAFE_INTEGER);
  const kvHeads = requireInt(shape.kvHeads, 'shape.kvHeads', 1, Number.MAX_SAFE_INTEGER);
  const headDim = requireInt(shape.headDim, 'shape.headDim', 1, Number.MAX_SAFE_INTEGER);
  const dtypeBytes = requireInt(shape.dtypeBytes, 'shape.dtypeBytes', 1, Number.MAX_SAFE_INTEGER);
  const tpb = requireInt(tokensPerBlock, 'tokensPerBlock', 1, Number.MAX_SAFE_INTEGER);

  // Products of huge fields may round, but then they are far above the limits, so the checks still hold.
  const tokenPlaneBytes = kvHeads * headDim * dtypeBytes;
  const planes = layers * 2;
  const bytesPerToken = bytesPerTokenOf({ layers, kvHeads, headDim, dtypeBytes });
  if (bytesPerToken > MAX_BYTES_PER_TOKEN) {
    throw invalid(`bytesPerToken ${bytesPerToken} exceeds ${MAX_BYTES_PER_TOKEN}`);
  }
  const blockBytes = tpb * bytesPerToken;
  if (blockBytes > MAX_BLOCK_BYTES) {
    throw invalid(`blockBytes ${blockBytes} exceeds ${MAX_BLOCK_BYTES}`);
  }
  return {
    tokensPerBlock: tpb,
    bytesPerToken,
    blockBytes,
    planes,
    planeBytes: tpb * tokenPlaneBytes,
    tokenPlaneBytes,
  };
}

/** Checks PoolOptions per docs/allocator.md and applies defaults; throws INVALID_ARGUMENT otherwise. */
export function validatePoolOptions(options: PoolOptions): NormalizedPoolOptions {
  if (!isObject(options)) throw invalid('options must be an object');
  const { shape } = options;
  const tokensPerBlock = options.tokensPerBlock ?? DEFAULT_TOKENS_PER_BLOCK;
  computeLayout(shape, tokensPerBlock);
  const blockCount = requireInt(options.blockCount, 'blockCount', 1, MAX_BLOCK_COUNT);
  const hostBlockCount = requireInt(options.hostBlockCount ?? 0, 'hostBlockCount', 0, MAX_BLOCK_COUNT - blockCount);
  const maxContexts = requireInt(options.maxContexts ?? DEFAULT_MAX_CONTEXTS, 'maxContexts', 1, MAX_CONTEXTS_LIMIT);
  const scrub: unknown = options.scrub ?? DEFAULT_SCRUB_POLICY;
  if (scrub !== 'on-tenant-change' && scrub !== 'always') {
    throw invalid(`scrub must be 'on-tenant-change' or 'always', got ${describe(scrub)}`);
  }
  const backend = requireBackend(options.backend ?? 'auto', 'backend');
  const device = requireInt(options.device ?? 0, 'device', 0, MAX_DEVICE_INDEX);
  const fraction: unknown = options.deviceMemoryFraction;
  if (fraction !== undefined && !(typeof fraction === 'number' && fraction > 0 && fraction <= 1)) {
    throw invalid(`deviceMemoryFraction must be a number in (0, 1], got ${describe(fraction)}`);
  }
  const verifyMoves: unknown = options.verifyMoves ?? true;
  if (typeof verifyMoves !== 'boolean') throw invalid(`verifyMoves must be a boolean, got ${describe(verifyMoves)}`);
  return {
    shape: { layers: shape.layers, kvHeads: shape.kvHeads, headDim: shape.headDim, dtypeBytes: shape.dtypeBytes },
    blockCount,
    hostBlockCount,
    tokensPerBlock,
    scrub,
    maxContexts,
    backend,
    device,
    verifyMoves,
    ...(fraction === undefined ? {} : { deviceMemoryFraction: fraction as number }),
  };
}
