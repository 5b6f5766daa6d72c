// llama.cpp's sequence-state files and kvfabric's pages: real states saved by llama.cpp (flash attention
// on and off, one and two streams) parse into rows, and the allocator lays those rows out again from its
// pages byte for byte; the layout is the one docs/engines.md describes, and bad bytes are typed errors. A
// property test covers random shapes and token counts.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import fc from 'fast-check';
import type { Llama, LlamaModel, Token } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric';
import { modelFile } from '../../src/engines/llama/default-model';
import { modelInfoFromMetadata, readModelInfo } from '../../src/engines/llama/gguf-shape';
import {
  bytesPerToken,
  parseSequenceState,
  readSequenceStateFile,
  sequenceStatePieces,
  type SequenceStateShape,
} from '../../src/engines/llama/sequence-state';
import { expectSameBytes } from '../fabric/implementations';
import { stateFromPool } from './state-in-pool';

const SHAPE: SequenceStateShape = { layers: 30, kvHeads: 3, headDim: 64, kType: 'f16', vType: 'f16' };
const stateDir = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();

function expectCode(run: () => unknown, code: string): void {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(FabricError);
    expect((err as FabricError).code).toBe(code);
    return;
  }
  throw new Error(`expected ${code}, nothing was thrown`);
}

describe('the default model', () => {
  it('has the shape kvfabric pools are sized for: 30 layers, 3 KV heads, head dim 64, 23,040 bytes per token', async () => {
    const info = await readModelInfo(modelFile());
    expect(info.shape).toEqual({ layers: 30, kvHeads: 3, headDim: 64, dtypeBytes: 2 });
    expect(bytesPerToken(SHAPE)).toBe(23_040);
    expect(info.trainedContextLength).toBe(8192);
  });
});

describe('real llama.cpp sequence states', () => {
  let llama: Llama;
  let model: LlamaModel;
  const saved = new Map<string, { file: Buffer; tokens: Token[] }>();

  beforeAll(async () => {
    const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
    llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    model = await llama.loadModel({ modelPath: modelFile() });
    expect(modelInfoFromMetadata(model.fileInfo.metadata).shape.layers).toBe(30);
    const tokens = model.tokenize('The paged allocator keeps every block of an agent context.');
    for (const flashAttention of [true, false]) {
      for (const sequences of [1, 2]) {
        const context = await model.createContext({ contextSize: 256, sequences, flashAttention, threads: 1 });
        // The second sequence when there are two, so the state's cells sit in a stream other than the first.
        const sequence = context.getSequence();
        const target = sequences === 2 ? context.getSequence() : sequence;
        await target.evaluateWithoutGeneratingNewTokens(tokens);
        const file = path.join(stateDir, `kvfabric-test-${process.pid}-${flashAttention}-${sequences}.ggsq`);
        await target.saveStateToFile(file);
        saved.set(`${flashAttention}/${sequences}`, { file: fs.readFileSync(file), tokens });
        fs.rmSync(file);
        await context.dispose();
      }
    }
  });

  afterAll(async () => {
    await model?.dispose();
    await llama?.dispose();
  });

  for (const flashAttention of [true, false]) {
    for (const sequences of [1, 2]) {
      it(`flash attention ${flashAttention ? 'on' : 'off'}, ${sequences} stream(s): parse -> rows -> pages -> state is byte-exact`, async () => {
        const { file, tokens } = saved.get(`${flashAttention}/${sequences}`)!;
        const state = parseSequenceState(file, SHAPE);
        expect(Array.from(state.tokens)).toEqual(tokens);
        expect(state.layout).toEqual({ vTransposed: !flashAttention, streams: sequences, stream: sequences - 1, seqId: sequences - 1 });
        expect(state.kv.length).toBe(tokens.length * 23_040);
        expectSameBytes(await stateFromPool(state.tokens, state.kv, SHAPE, state.layout), file);
        // A suffix parse is the tail of the full rows; read from a file at offsets, the same.
        expectSameBytes(parseSequenceState(file, SHAPE, 3).kv, state.kv.subarray(3 * 23_040));
        const onDisk = path.join(stateDir, `kvfabric-test-${process.pid}-read.ggsq`);
        fs.writeFileSync(onDisk, file);
        try {
          for (const from of [0, 3, tokens.length]) {
            const read = readSequenceStateFile(onDisk, SHAPE, from);
            expectSameBytes(read.kv, state.kv.subarray(from * 23_040));
            expect(read.layout).toEqual(state.layout);
          }
        } finally {
          fs.rmSync(onDisk);
        }
      });
    }
  }

  it('the header is what docs/engines.md says: ggsq, version 3, tokens, streams, cells at 0..n-1, v_trans, 30 layers, f16 rows of 384 bytes', () => {
    const { file, tokens } = saved.get('false/1')!;
    const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
    const n = tokens.length;
    expect(file.subarray(0, 4).toString('latin1')).toBe('qsgg'); // 0x67677371 little-endian
    expect(view.getUint32(4, true)).toBe(3);
    expect(view.getUint32(8, true)).toBe(n);
    let at = 12 + 4 * n;
    expect(view.getUint32(at, true)).toBe(1); // streams
    expect(view.getUint32(at + 4, true)).toBe(n); // cells
    at += 8;
    for (let i = 0; i < n; i++, at += 12)
      expect([view.getInt32(at, true), view.getUint32(at + 4, true), view.getInt32(at + 8, true)]).toEqual([i, 1, 0]);
    expect([view.getUint32(at, true), view.getUint32(at + 4, true)]).toEqual([1, 30]); // v_trans, layers
    expect([view.getInt32(at + 8, true), Number(view.getBigUint64(at + 12, true))]).toEqual([1, 384]); // f16 K rows
    const vStart = at + 8 + 30 * (12 + n * 384);
    expect([view.getInt32(vStart, true), view.getUint32(vStart + 4, true), view.getUint32(vStart + 8, true)]).toEqual([1, 2, 192]); // f16, 2 bytes, 192 elements
    expect(file.length).toBe(vStart + 30 * (12 + n * 384));
  });

  it('flash attention on and off agree on layer 0 but not deeper: the attention path changes the numbers, so it is part of the fingerprint', () => {
    const on = parseSequenceState(saved.get('true/1')!.file, SHAPE);
    const off = parseSequenceState(saved.get('false/1')!.file, SHAPE);
    const layer0 = 2 * 384;
    for (let t = 0; t < on.tokens.length; t++)
      expectSameBytes(on.kv.subarray(t * 23_040, t * 23_040 + layer0), off.kv.subarray(t * 23_040, t * 23_040 + layer0));
    expect(Buffer.from(on.kv).equals(Buffer.from(off.kv))).toBe(false);
  });

  it('bad bytes are INTEGRITY, a state of another K/V type or layer count is INCOMPATIBLE, never a crash', () => {
    const { file, tokens } = saved.get('true/1')!;
    expectCode(() => parseSequenceState(file.subarray(0, file.length - 1), SHAPE), 'INTEGRITY');
    expectCode(() => parseSequenceState(Buffer.concat([file, Buffer.alloc(1)]), SHAPE), 'INTEGRITY');
    expectCode(() => parseSequenceState(new Uint8Array(3), SHAPE), 'INTEGRITY');
    const badMagic = Buffer.from(file);
    badMagic[0] = 0;
    expectCode(() => parseSequenceState(badMagic, SHAPE), 'INTEGRITY');
    const badPos = Buffer.from(file);
    badPos.writeInt32LE(5, 12 + 4 * tokens.length + 8 + 12); // cell 1 at position 5
    expectCode(() => parseSequenceState(badPos, SHAPE), 'INTEGRITY');
    const hugeCount = Buffer.from(file);
    hugeCount.writeUInt32LE(0xffffffff, 8);
    expectCode(() => parseSequenceState(hugeCount, SHAPE), 'INTEGRITY');
    expectCode(() => parseSequenceState(file, { ...SHAPE, kType: 'bf16' }), 'INCOMPATIBLE');
    expectCode(() => parseSequenceState(file, { ...SHAPE, layers: 32 }), 'INCOMPATIBLE');
    expectCode(
      () => sequenceStatePieces(Uint32Array.of(), SHAPE, { vTransposed: false, streams: 1, stream: 0, seqId: 0 }),
      'INVALID_ARGUMENT',
    );
    expectCode(
      () => sequenceStatePieces(Uint32Array.of(1), SHAPE, { vTransposed: false, streams: 1, stream: 1, seqId: 0 }),
      'INVALID_ARGUMENT',
    );
  });
});

describe('the converter on random shapes (property)', () => {
  const shapes = fc.record({
    layers: fc.integer({ min: 1, max: 4 }),
    kvHeads: fc.integer({ min: 1, max: 3 }),
    headDim: fc.integer({ min: 1, max: 5 }),
    kType: fc.constantFrom('f16' as const, 'f32' as const, 'bf16' as const),
  });

  const onDisk = path.join(stateDir, `kvfabric-test-${process.pid}-property.ggsq`);
  afterAll(() => fs.rmSync(onDisk, { force: true }));

  it('rows -> pages -> state -> rows is the identity, and state -> rows -> pages -> state too, for any token count, streams and V layout', async () => {
    await fc.assert(
      fc.asyncProperty(
        shapes,
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 1, max: 4 }),
        fc.nat(),
        fc.boolean(),
        fc.integer(),
        async (s, n, streams, streamPick, vTransposed, seed) => {
          const layout = { vTransposed, streams, stream: streamPick % streams, seqId: streamPick % 5 };
          const shape: SequenceStateShape = { ...s, vType: s.kType };
          const tokens = Uint32Array.from({ length: n }, (_, i) => (seed + i * 7919) >>> 0);
          const kv = Uint8Array.from({ length: n * bytesPerToken(shape) }, (_, i) => (seed + i * 31 + (i >> 8) * 7) & 0xff);
          const file = await stateFromPool(tokens, kv, shape, layout);
          const state = parseSequenceState(file, shape);
          expect(Array.from(state.tokens)).toEqual(Array.from(tokens));
          expectSameBytes(state.kv, kv);
          expect(state.layout).toEqual(layout);
          expectSameBytes(await stateFromPool(state.tokens, state.kv, shape, state.layout), file);
          const from = Math.floor(n / 2);
          expectSameBytes(parseSequenceState(file, shape, from).kv, kv.subarray(from * bytesPerToken(shape)));
          fs.writeFileSync(onDisk, file);
          expectSameBytes(readSequenceStateFile(onDisk, shape, from).kv, kv.subarray(from * bytesPerToken(shape)));
        },
      ),
      { numRuns: 100 },
    );
  });

  it('any truncation of a state is INTEGRITY, in memory and read from a file', async () => {
    const shape: SequenceStateShape = { layers: 2, kvHeads: 1, headDim: 2, kType: 'f16', vType: 'f16' };
    const file = await stateFromPool(Uint32Array.of(4, 5, 6), new Uint8Array(3 * bytesPerToken(shape)).fill(9), shape, {
      vTransposed: true,
      streams: 2,
      stream: 1,
      seqId: 1,
    });
    const onDisk = path.join(stateDir, `kvfabric-test-${process.pid}-cut.ggsq`);
    try {
      fc.assert(
        fc.property(fc.integer({ min: 0, max: file.length - 1 }), fc.integer({ min: 0, max: 3 }), (cut, from) => {
          expectCode(() => parseSequenceState(file.subarray(0, cut), shape, from), 'INTEGRITY');
          fs.writeFileSync(onDisk, file.subarray(0, cut));
          expectCode(() => readSequenceStateFile(onDisk, shape, from), 'INTEGRITY');
        }),
      );
    } finally {
      fs.rmSync(onDisk, { force: true });
    }
  });
});
