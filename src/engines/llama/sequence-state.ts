// llama.cpp's sequence-state file (llama_state_seq_save_file, "GGSQ" version 3) from kvfabric's pages
// (laid out natively, sequenceStatePieces) and to token-major rows (a turn's new part). Layout, little-endian, as written by
// llama.cpp v0.5.0 (node-llama-cpp 3.22.1) and checked against real saved files (docs/engines.md):
//   u32 magic 'ggsq' (0x67677371), u32 version 3, u32 n_tokens, i32 tokens[n_tokens]
//   u32 n_stream (the llama context's sequence count; 1 with a unified cache), then per stream:
//   u32 cell_count, and when it is not 0 (only the sequence's own stream):
//   cell_count x { i32 pos, u32 n_seq_id (1), i32 seq_id }
//   u32 v_trans, u32 n_layer
//   per layer: i32 k_type, u64 k_row_bytes, cell_count rows of k_row_bytes          (K: one row per cell)
//   v_trans 0, per layer: i32 v_type, u64 v_row_bytes, cell_count rows              (flash attention on)
//   v_trans 1, per layer: i32 v_type, u32 v_el_bytes, u32 n_embd_v_gqa, then for each of the
//              n_embd_v_gqa elements, that element of every cell                     (flash attention off)
// A row is [kvHead][headDim]. kvfabric's token-major bytes are [token][layer][K,V][kvHead][headDim], so
// a token's bytes are its K row and V row of every layer in turn.
// Only what kvfabric needs is accepted: one stream holding cells, no per-cell extension (M-RoPE models), the cells of
// exactly the listed tokens at positions 0..n-1, and non-block K/V types (f16, bf16, f32). Anything else
// is INTEGRITY (bytes that cannot be this file) or INCOMPATIBLE (a well-formed state of another setting).
import fs from 'node:fs';

import { FabricError } from '../../fabric/errors';
import { bytesPerTokenOf } from '../../fabric/layout';
import type { PlaneMajorPiece } from '../../fabric/types';

export const GGSQ_MAGIC = 0x67677371;
export const GGSQ_VERSION = 3;

/** ggml type ids of the element types rows may hold, and their sizes. */
export const GGML_TYPES = Object.freeze({ f32: { id: 0, bytes: 4 }, f16: { id: 1, bytes: 2 }, bf16: { id: 30, bytes: 2 } });
export type KvType = keyof typeof GGML_TYPES;

/** What a sequence state must look like for one engine: the model's KV shape and the context's types. */
export interface SequenceStateShape {
  layers: number;
  kvHeads: number;
  headDim: number;
  kType: KvType;
  vType: KvType;
}

/** How a file lays the rows out, beyond the shape: what a rebuilt file must repeat to match byte for byte. */
export interface StateLayout {
  /** V stored transposed (flash attention off). */
  vTransposed: boolean;
  /** The llama context's stream count (its sequence count unless the cache is unified). */
  streams: number;
  /** The stream holding the sequence's cells, and the sequence id written in each cell: llama.cpp ignores
   * both on load and restores into the target sequence's own. */
  stream: number;
  seqId: number;
}

export interface SequenceState {
  tokens: Uint32Array;
  /** Token-major rows of tokens [fromToken, n_tokens). */
  kv: Uint8Array;
  layout: StateLayout;
}

const HEADER_BYTES = 12;
/** llama.cpp's LLAMA_MAX_SEQ. */
const MAX_STREAMS = 256;
const CELL_BYTES = 12;

/** Bytes of one token in kvfabric's layout; both K/V types must have the same element size. */
export function bytesPerToken(shape: SequenceStateShape): number {
  const { layers, kvHeads, headDim } = shape;
  return bytesPerTokenOf({ layers, kvHeads, headDim, dtypeBytes: GGML_TYPES[shape.kType].bytes });
}

function integrity(message: string): FabricError {
  return new FabricError('INTEGRITY', `sequence state: ${message}`);
}

function incompatible(message: string): FabricError {
  return new FabricError('INCOMPATIBLE', `sequence state: ${message}`);
}

/**
 * Where a state's bytes come from: memory (a whole file already read) or an open file read at offsets, so
 * a turn that needs only its last rows does not read every row of a long context.
 */
interface StateSource {
  readonly length: number;
  read(offset: number, length: number): Uint8Array;
}

function memorySource(bytes: Uint8Array): StateSource {
  return { length: bytes.length, read: (offset, length) => bytes.subarray(offset, offset + length) };
}

function fileSource(fd: number, length: number): StateSource {
  return {
    length,
    read(offset, n) {
      const out = Buffer.allocUnsafe(n);
      for (let done = 0; done < n; ) {
        const got = fs.readSync(fd, out, done, n - done, offset + done);
        if (got === 0) throw integrity(`file ended at ${offset + done} while reading ${n} bytes at ${offset}`);
        done += got;
      }
      return out;
    },
  };
}

/** Bounds-checked little-endian reader: running past the end is INTEGRITY, never a RangeError. */
class Reader {
  offset = 0;
  constructor(private readonly source: StateSource) {}
  get length(): number {
    return this.source.length;
  }
  need(n: number, what: string): void {
    if (this.offset + n > this.source.length)
      throw integrity(`truncated in ${what} (offset ${this.offset}, need ${n}, have ${this.source.length - this.offset})`);
  }
  /** n bytes at the cursor, which moves past them. */
  take(n: number, what: string): DataView {
    this.need(n, what);
    const bytes = this.source.read(this.offset, n);
    this.offset += n;
    return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  /** n bytes at `offset` from the cursor, without moving it (the caller checked the bounds with need). */
  peek(offset: number, n: number): Uint8Array {
    return this.source.read(this.offset + offset, n);
  }
  skip(n: number, what: string): void {
    this.need(n, what);
    this.offset += n;
  }
  u32(what: string): number {
    return this.take(4, what).getUint32(0, true);
  }
  i32(what: string): number {
    return this.take(4, what).getInt32(0, true);
  }
  u64(what: string): number {
    const value = this.take(8, what).getBigUint64(0, true);
    return value > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(value);
  }
}

function expectType(actual: number, expected: KvType, what: string): void {
  if (actual !== GGML_TYPES[expected].id)
    throw incompatible(`${what} type is ggml type ${actual}, this engine uses ${expected} (${GGML_TYPES[expected].id})`);
}

/**
 * Splits a saved sequence state into its token ids and token-major rows of tokens [fromToken, n).
 * INTEGRITY when the bytes are not a well-formed state of `shape`; INCOMPATIBLE for a different K/V type.
 */
export function parseSequenceState(file: Uint8Array, shape: SequenceStateShape, fromToken = 0): SequenceState {
  return parseFrom(memorySource(file), shape, fromToken);
}

/**
 * parseSequenceState of a file on disk, reading only the rows of tokens [fromToken, n) besides the headers
 * (the way out of a turn: llama.cpp saves the whole sequence, the turn wants its last rows). The whole file
 * is still checked for shape and size.
 */
export function readSequenceStateFile(file: string, shape: SequenceStateShape, fromToken = 0): SequenceState {
  const fd = fs.openSync(file, 'r');
  try {
    return parseFrom(fileSource(fd, fs.fstatSync(fd).size), shape, fromToken);
  } finally {
    fs.closeSync(fd);
  }
}

function parseFrom(source: StateSource, shape: SequenceStateShape, fromToken: number): SequenceState {
  const r = new Reader(source);
  if (r.u32('magic') !== GGSQ_MAGIC) throw integrity('bad magic (not a GGSQ file)');
  const version = r.u32('version');
  if (version !== GGSQ_VERSION) throw incompatible(`version ${version}, expected ${GGSQ_VERSION}`);
  const nTokens = r.u32('token count');
  const tokenView = r.take(nTokens * 4, 'tokens');
  const tokens = new Uint32Array(nTokens);
  for (let i = 0; i < nTokens; i++) tokens[i] = tokenView.getUint32(i * 4, true);
  if (!Number.isSafeInteger(fromToken) || fromToken < 0 || fromToken > nTokens) {
    throw new FabricError('OUT_OF_RANGE', `fromToken ${fromToken} outside [0, ${nTokens}]`);
  }

  // One stream per sequence unless llama.cpp's cache is unified; a sequence lives in one of them, so every
  // other stream's cell count is 0 (and has nothing after it).
  const nStream = r.u32('stream count');
  if (nStream < 1 || nStream > MAX_STREAMS) throw integrity(`${nStream} streams`);
  let cells = 0;
  let stream = 0;
  for (; stream < nStream; stream++) {
    cells = r.u32('cell count');
    if (cells !== 0) break;
  }
  if (cells !== nTokens) throw integrity(`${cells} KV cells for ${nTokens} tokens`);
  const rowBytes = shape.kvHeads * shape.headDim * GGML_TYPES[shape.kType].bytes;
  const tokenBytes = bytesPerToken(shape);
  const kv = new Uint8Array((nTokens - fromToken) * tokenBytes);
  if (cells === 0) {
    if (r.offset !== r.length) throw integrity(`${r.length - r.offset} trailing bytes`);
    return { tokens, kv, layout: { vTransposed: false, streams: nStream, stream: 0, seqId: 0 } };
  }

  const cellView = r.take(cells * CELL_BYTES, 'cells');
  const seqId = cellView.getInt32(8, true);
  for (let i = 0; i < cells; i++) {
    const pos = cellView.getInt32(i * CELL_BYTES, true);
    const seqIds = cellView.getUint32(i * CELL_BYTES + 4, true);
    const id = cellView.getInt32(i * CELL_BYTES + 8, true);
    if (id !== seqId || id < 0) throw integrity(`cell ${i} of sequence ${id}, cell 0 of ${seqId}`);
    // A gap or shift would mean token i's KV is not at position i, which rows cannot express.
    if (pos !== i) throw integrity(`cell ${i} at position ${pos}`);
    if (seqIds !== 1) throw integrity(`cell ${i} has ${seqIds} sequence ids (per-cell extensions are not supported)`);
  }

  const vTrans = r.u32('v_trans');
  if (vTrans > 1) throw integrity(`v_trans ${vTrans}`);
  const layers = r.u32('layer count');
  if (layers !== shape.layers) throw incompatible(`${layers} layers, this model has ${shape.layers}`);

  const kept = cells - fromToken;
  /** Rows [fromToken, cells) of one layer's K or untransposed V, placed at `out` in each token's bytes. */
  const copyRows = (out: number, what: string) => {
    r.need(cells * rowBytes, what);
    const rows = r.peek(fromToken * rowBytes, kept * rowBytes);
    for (let t = 0; t < kept; t++) kv.set(rows.subarray(t * rowBytes, (t + 1) * rowBytes), t * tokenBytes + out);
    r.skip(cells * rowBytes, what);
  };
  for (let layer = 0; layer < layers; layer++) {
    expectType(r.i32('K type'), shape.kType, `layer ${layer} K`);
    const kRow = r.u64('K row size');
    if (kRow !== rowBytes) throw incompatible(`layer ${layer} K rows of ${kRow} bytes, expected ${rowBytes}`);
    copyRows(2 * layer * rowBytes, `layer ${layer} K`);
  }
  for (let layer = 0; layer < layers; layer++) {
    expectType(r.i32('V type'), shape.vType, `layer ${layer} V`);
    const vOut = (2 * layer + 1) * rowBytes;
    if (vTrans === 0) {
      const vRow = r.u64('V row size');
      if (vRow !== rowBytes) throw incompatible(`layer ${layer} V rows of ${vRow} bytes, expected ${rowBytes}`);
      copyRows(vOut, `layer ${layer} V`);
    } else {
      const el = r.u32('V element size');
      const nEmbd = r.u32('V embedding size');
      if (el !== GGML_TYPES[shape.vType].bytes || nEmbd * el !== rowBytes) {
        throw incompatible(`layer ${layer} V of ${nEmbd} elements x ${el} bytes, expected ${rowBytes} bytes per row`);
      }
      r.need(nEmbd * cells * el, `layer ${layer} V`);
      // Transposed: element j of every cell is contiguous; gather it into each token's row.
      for (let j = 0; j < nEmbd; j++) {
        const values = r.peek((j * cells + fromToken) * el, kept * el);
        for (let t = 0; t < kept; t++) {
          const out = t * tokenBytes + vOut + j * el;
          for (let b = 0; b < el; b++) kv[out + b] = values[t * el + b]!;
        }
      }
      r.skip(nEmbd * cells * el, `layer ${layer} V`);
    }
  }
  for (let rest = stream + 1; rest < nStream; rest++) {
    if (r.u32('cell count') !== 0) throw integrity(`a second stream holds cells of the sequence`);
  }
  if (r.offset !== r.length) throw integrity(`${r.length - r.offset} trailing bytes`);
  return { tokens, kv, layout: { vTransposed: vTrans === 1, streams: nStream, stream, seqId } };
}

/**
 * The sequence-state file llama.cpp would have saved for `tokens`, as pieces for the allocator to lay out
 * (NativeAllocator.writePlaneMajorAsync): the headers as literal bytes, and each layer's K and V rows
 * taken straight from the pages (plane 2 x layer for K, 2 x layer + 1 for V; V element-transposed
 * without flash attention). The inverse of parseSequenceState, byte for byte, with no KV byte in
 * JavaScript. INVALID_ARGUMENT for an empty sequence (nothing to load) or a bad stream.
 */
export function sequenceStatePieces(tokens: Uint32Array, shape: SequenceStateShape, layout: StateLayout): PlaneMajorPiece[] {
  const { vTransposed, streams, stream, seqId } = layout;
  const n = tokens.length;
  if (n === 0) throw new FabricError('INVALID_ARGUMENT', 'an empty sequence has no state to load');
  if (
    !Number.isSafeInteger(streams) ||
    streams < 1 ||
    streams > MAX_STREAMS ||
    !Number.isSafeInteger(stream) ||
    stream < 0 ||
    stream >= streams
  ) {
    throw new FabricError('INVALID_ARGUMENT', `stream ${stream} of ${streams}`);
  }
  if (!Number.isSafeInteger(seqId) || seqId < 0 || seqId > 0x7fffffff) throw new FabricError('INVALID_ARGUMENT', `seqId ${seqId}`);
  const head = new Bytes(HEADER_BYTES + 4 * n + 4 + 4 * stream + 4 + CELL_BYTES * n + 8);
  head.u32(GGSQ_MAGIC).u32(GGSQ_VERSION).u32(n);
  for (let i = 0; i < n; i++) head.u32(tokens[i]!);
  head.u32(streams);
  for (let s = 0; s < stream; s++) head.u32(0);
  head.u32(n);
  for (let i = 0; i < n; i++) head.u32(i).u32(1).u32(seqId); // pos, one sequence id, the id
  head.u32(vTransposed ? 1 : 0).u32(shape.layers);

  const rowBytes = shape.kvHeads * shape.headDim * GGML_TYPES[shape.kType].bytes;
  const pieces: PlaneMajorPiece[] = [{ bytes: head.bytes }];
  for (let layer = 0; layer < shape.layers; layer++) {
    pieces.push({ bytes: new Bytes(12).u32(GGML_TYPES[shape.kType].id).u64(rowBytes).bytes }, { plane: 2 * layer });
  }
  for (let layer = 0; layer < shape.layers; layer++) {
    const type = GGML_TYPES[shape.vType];
    if (!vTransposed) {
      pieces.push({ bytes: new Bytes(12).u32(type.id).u64(rowBytes).bytes }, { plane: 2 * layer + 1 });
    } else {
      pieces.push(
        {
          bytes: new Bytes(12)
            .u32(type.id)
            .u32(type.bytes)
            .u32(rowBytes / type.bytes).bytes,
        },
        {
          plane: 2 * layer + 1,
          elementBytes: type.bytes,
        },
      );
    }
  }
  if (stream + 1 < streams) pieces.push({ bytes: new Uint8Array(4 * (streams - stream - 1)) });
  return pieces;
}

/** Little-endian header bytes, written in order. */
class Bytes {
  readonly bytes: Uint8Array;
  private readonly view: DataView;
  private at = 0;

  constructor(length: number) {
    this.bytes = new Uint8Array(length);
    this.view = new DataView(this.bytes.buffer);
  }

  u32(value: number): this {
    this.view.setUint32(this.at, value, true);
    this.at += 4;
    return this;
  }

  u64(value: number): this {
    this.view.setBigUint64(this.at, BigInt(value), true);
    this.at += 8;
    return this;
  }
}
