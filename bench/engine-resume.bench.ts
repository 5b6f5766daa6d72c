// Resume vs re-prefill with a real model (the llama engine's default, SmolLM2-135M, on this machine's
// CPU), in one run: for each context size, prefill the tokens once (timed), store the KV rows in a
// kvfabric pool, then bring the context back from the pool's pages into a fresh llama sequence: read the
// rows, rebuild the GGSQ state, load it; and the same from kvfabric's disk tier (restore first). Every
// path ends with a sequence ready for the next token, and the bench checks they then generate the same
// greedy tokens as the prefilled one.
//   npm run bench:engine -- [--tokens 512,2k,8k] [--repeats 3] [--threads N] [--json build/bench/engine-resume.json]
// 8k is 8,000 tokens: the model's trained context is 8,192 and the check needs a few more.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { LlamaContextSequence, Token } from 'node-llama-cpp';

import { NativeAllocator } from '../src/fabric';
import { modelFile, sha256File } from '../src/engines/llama/default-model';
import { modelInfoFromMetadata } from '../src/engines/llama/gguf-shape';
import {
  buildSequenceState,
  parseSequenceState,
  readSequenceStateFile,
  type SequenceStateShape,
} from '../src/engines/llama/sequence-state';
import { ColdStore, KeyRing } from '../src/tiers/cold';
import { TieredMemory } from '../src/tiers/tiered-memory';
import { dropPageCache, median, modelContextSizes, option, printTable } from './measure';

const sizes = modelContextSizes(option('--tokens') ?? '512,2k,8k');
const repeats = Number(option('--repeats') ?? '3');
const threads = Number(option('--threads') ?? Math.max(1, os.availableParallelism() - 1));
const jsonPath = option('--json');
const CHECK_TOKENS = 4;
const stateDir = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();

interface Row {
  tokens: number;
  kvBytes: number;
  prefillMs: number;
  resumeMs: number;
  readMs: number;
  buildMs: number;
  writeMs: number;
  loadMs: number;
  ratio: number;
  sameContinuation: boolean;
  /** The out path a turn pays: save the whole sequence to tmpfs and cut the last turn's rows (64 tokens). */
  saveMs: number;
  /** The same resume with the pages on disk (kvfabric's cold tier, page cache dropped when root): restore, read, build, load. */
  diskResumeMs: number;
  diskRatio: number;
}

const now = () => performance.now();

async function greedy(sequence: LlamaContextSequence, count: number): Promise<Token[]> {
  // The last context token is fed again after erasing it, so both paths sample from the same logits.
  const last = sequence.contextTokens.at(-1)!;
  await sequence.eraseContextTokenRanges([{ start: sequence.nextTokenIndex - 1, end: sequence.nextTokenIndex }]);
  const out: Token[] = [];
  for await (const token of sequence.evaluate([last], { temperature: 0 })) {
    out.push(token);
    if (out.length >= count) break;
  }
  return out;
}

async function main(): Promise<void> {
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const file = modelFile();
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: file });
  const info = modelInfoFromMetadata(model.fileInfo.metadata);
  const shape: SequenceStateShape = {
    layers: info.shape.layers,
    kvHeads: info.shape.kvHeads,
    headDim: info.shape.headDim,
    kType: 'f16',
    vType: 'f16',
  };
  const contextSize = Math.max(...sizes) + CHECK_TOKENS + 8;
  const context = await model.createContext({ contextSize, sequences: 1, flashAttention: true, threads });
  const pool = new NativeAllocator({ shape: info.shape, blockCount: Math.ceil(contextSize / 16) + 1, backend: 'cpu' });
  // The disk path: a second pool whose context lives in the encrypted cold tier between resumes.
  const blocks = Math.ceil(contextSize / 16) + 1;
  const diskPool = new NativeAllocator({ shape: info.shape, blockCount: blocks, hostBlockCount: blocks, backend: 'cpu' });
  const coldDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-engine-bench-'));
  const cold = await ColdStore.open({ directory: coldDir, keyRing: new KeyRing([{ id: 'bench', key: randomBytes(32) }], 'bench') });
  const tiers = new TieredMemory({ pool: diskPool, cold, deviceLowWatermark: 0, hostLowWatermark: 0 });
  const bytesPerToken = pool.layout.bytesPerToken;
  console.log(
    `model ${path.basename(file)} (${(await sha256File(file)).slice(0, 12)}), ${bytesPerToken} bytes/token, flash attention on, ${threads} thread(s), state via ${stateDir}`,
  );

  // Deterministic prose, tokenized once and cut to each size.
  const text = Array.from({ length: 2000 }, (_, i) => `Agent ${i % 17} stored block ${i} of its context in tier ${i % 3}.`).join(' ');
  const allTokens = model.tokenize(text);
  if (allTokens.length < Math.max(...sizes)) throw new Error(`the bench text has only ${allTokens.length} tokens`);

  const rows: Row[] = [];
  for (const n of sizes) {
    const tokens = allTokens.slice(0, n);
    // Prefill, once (8k takes minutes here), in 512-token steps so progress shows.
    let sequence = context.getSequence();
    const prefillStart = now();
    for (let at = 0; at < n; at += 512) {
      await sequence.evaluateWithoutGeneratingNewTokens(tokens.slice(at, at + 512));
      if (n > 2048)
        process.stdout.write(`\r  prefill ${n}: ${Math.min(n, at + 512)} tokens, ${((now() - prefillStart) / 1000).toFixed(0)} s`);
    }
    const prefillMs = now() - prefillStart;
    if (n > 2048) process.stdout.write('\n');

    // Into kvfabric: save, cut rows, append to the pool. The save and reading back the last 64 tokens' rows
    // are what every turn pays on the way out (llama.cpp saves a whole sequence), so that is timed too.
    const statePath = path.join(stateDir, `kvfabric-bench-${process.pid}.ggsq`);
    const saves: number[] = [];
    for (let r = 0; r < repeats; r++) {
      const s0 = now();
      await sequence.saveStateToFile(statePath);
      readSequenceStateFile(statePath, shape, n - 64);
      saves.push(now() - s0);
    }
    const saved = parseSequenceState(fs.readFileSync(statePath), shape);
    const handle = pool.createContext(1);
    pool.append(handle, saved.kv);
    const expected = await greedy(sequence, CHECK_TOKENS);
    sequence.dispose();

    const timings: Array<Pick<Row, 'resumeMs' | 'readMs' | 'buildMs' | 'writeMs' | 'loadMs'>> = [];
    let sameContinuation = true;
    for (let r = 0; r < repeats; r++) {
      sequence = context.getSequence();
      const t0 = now();
      const kv = pool.read(handle, 0, n);
      const t1 = now();
      const state = buildSequenceState(saved.tokens, kv, shape, { vTransposed: false, streams: saved.layout.streams, stream: 0, seqId: 0 });
      const t2 = now();
      fs.writeFileSync(statePath, state);
      const t3 = now();
      await sequence.loadStateFromFile(statePath, { acceptRisk: true });
      const t4 = now();
      timings.push({ resumeMs: t4 - t0, readMs: t1 - t0, buildMs: t2 - t1, writeMs: t3 - t2, loadMs: t4 - t3 });
      const got = await greedy(sequence, CHECK_TOKENS);
      sameContinuation &&= got.join() === expected.join();
      sequence.dispose();
    }
    const diskTimings: number[] = [];
    tiers.create('context', 1);
    await tiers.append('context', saved.kv);
    for (let r = 0; r < repeats; r++) {
      await tiers.offload('context', 'disk');
      dropPageCache();
      sequence = context.getSequence();
      const t0 = now();
      await tiers.restore('context');
      const kv = await tiers.read('context', 0, n);
      fs.writeFileSync(
        statePath,
        buildSequenceState(saved.tokens, kv, shape, { vTransposed: false, streams: saved.layout.streams, stream: 0, seqId: 0 }),
      );
      await sequence.loadStateFromFile(statePath, { acceptRisk: true });
      diskTimings.push(now() - t0);
      sameContinuation &&= (await greedy(sequence, CHECK_TOKENS)).join() === expected.join();
      sequence.dispose();
    }
    await tiers.release('context');
    fs.rmSync(statePath, { force: true });
    pool.release(handle);
    const pick = (key: keyof (typeof timings)[number]) => median(timings.map((t) => t[key]));
    const row: Row = {
      tokens: n,
      kvBytes: n * bytesPerToken,
      prefillMs,
      resumeMs: pick('resumeMs'),
      readMs: pick('readMs'),
      buildMs: pick('buildMs'),
      writeMs: pick('writeMs'),
      loadMs: pick('loadMs'),
      ratio: prefillMs / pick('resumeMs'),
      sameContinuation,
      saveMs: median(saves),
      diskResumeMs: median(diskTimings),
      diskRatio: prefillMs / median(diskTimings),
    };
    rows.push(row);
    console.log(
      `  ${n} tokens: prefill ${(prefillMs / 1000).toFixed(2)} s, resume ${row.resumeMs.toFixed(1)} ms (${row.ratio.toFixed(0)}x), from disk ${row.diskResumeMs.toFixed(1)} ms (${row.diskRatio.toFixed(0)}x), same continuation: ${sameContinuation}`,
    );
  }

  console.log('');
  printTable(
    [
      'tokens',
      'KV',
      'prefill',
      `resume (median of ${repeats})`,
      'read pages',
      'build GGSQ',
      'write tmpfs',
      'llama load',
      'prefill / resume',
      'from disk',
      'prefill / disk',
      'same tokens after',
      'turn out: save + cut 64',
    ],
    rows.map((r) => [
      String(r.tokens),
      `${(r.kvBytes / 2 ** 20).toFixed(1)} MiB`,
      `${(r.prefillMs / 1000).toFixed(2)} s`,
      `${r.resumeMs.toFixed(1)} ms`,
      `${r.readMs.toFixed(1)} ms`,
      `${r.buildMs.toFixed(1)} ms`,
      `${r.writeMs.toFixed(1)} ms`,
      `${r.loadMs.toFixed(1)} ms`,
      `${r.ratio.toFixed(0)}x`,
      `${r.diskResumeMs.toFixed(1)} ms`,
      `${r.diskRatio.toFixed(0)}x`,
      String(r.sameContinuation),
      `${r.saveMs.toFixed(1)} ms`,
    ]),
  );
  if (jsonPath) {
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
    fs.writeFileSync(jsonPath, JSON.stringify({ threads, rows }, null, 2));
  }
  pool.close();
  diskPool.close();
  await cold.close();
  fs.rmSync(coldDir, { recursive: true, force: true });
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  if (rows.some((r) => !r.sameContinuation)) process.exitCode = 1;
}

void main();
