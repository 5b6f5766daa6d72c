// Resume vs re-prefill with a real model (the llama engine's default, SmolLM2-135M, on this machine's
// CPU), and the engine's overhead against node-llama-cpp alone, all in one run. For each context size:
//   - re-prefill: the tokens evaluated once by node-llama-cpp alone (timed), its state saved to tmpfs;
//   - llama.cpp's own load: that state file loaded into a fresh sequence (loadStateFromFile), alone;
//   - pages to a ready sequence: the same KV in a kvfabric pool's host tier, loaded by the LlamaEngine
//     (laid out natively from the pages into its memory file, checked page by page, then llama.cpp's load),
//     alternated with llama.cpp's own load, and checked to hold the prefilled KV byte for byte;
//   - the same from kvfabric's disk tier (restore first; page cache dropped when root);
//   - a turn: the engine's hot turn against node-llama-cpp's own turn of the same tokens (same threads,
//     flash attention, K/V f16), alternated, and the engine's save of the turn's KV (write-behind: off
//     the turn's path).
//   npm run bench:engine -- [--tokens 512,2k,8k] [--repeats 3] [--threads N] [--json build/bench/engine-resume.json]
// 8k is 8,000 tokens: the model's trained context is 8,192 and the turns need a few more.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { LlamaContext, LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp';

import type { StoredContext } from '../src/engines/engine';
import { chatMlTurnFormat } from '../src/engines/llama/chat-turn';
import { modelFile, sha256File } from '../src/engines/llama/default-model';
import { modelInfoFromMetadata } from '../src/engines/llama/gguf-shape';
import { LlamaEngine } from '../src/engines/llama/llama-engine';
import { parseSequenceState, sequenceStatePieces, type SequenceStateShape } from '../src/engines/llama/sequence-state';
import { createMemoryFile, NativeAllocator } from '../src/fabric';
import { ColdStore, KeyRing } from '../src/tiers/cold';
import { TieredMemory } from '../src/tiers/tiered-memory';
import { dropPageCache, median, modelContextSizes, option, printTable } from './measure';

const sizes = modelContextSizes(option('--tokens') ?? '512,2k,8k');
const repeats = Number(option('--repeats') ?? '3');
/** Loads take a fraction of a second: more of them steady the medians the load target is judged on. */
const loadRepeats = Math.max(repeats, 7);
const threads = Number(option('--threads') ?? Math.max(1, os.availableParallelism() - 1));
const jsonPath = option('--json');
const stateDir = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const TURN_MESSAGE = 'Summarize the above in one sentence.';
const TURN_MAX_TOKENS = 24;
/** Room a turn needs past the context: its ChatML prompt, TURN_MAX_TOKENS and the closing tokens. */
const TURN_ROOM = 48;

/** One context size's figures (the JSON's rows; bench/run-all.ts reads them). */
export interface EngineResumeRow {
  tokens: number;
  kvBytes: number;
  prefillMs: number;
  /** llama.cpp's own loadStateFromFile of the saved state (tmpfs), median. */
  llamaLoadMs: number;
  /** Pages (host tier) to a ready sequence through the engine, median. */
  resumeMs: number;
  /** The engine's first such load, which also allocates its memory file's pages (once per engine). */
  firstLoadMs: number;
  /** Laying the state out from the pages into a memory file, alone (measured apart), median. */
  assembleMs: number;
  /** resumeMs / llamaLoadMs. */
  loadRatio: number;
  /** prefillMs / resumeMs. */
  ratio: number;
  /** The engine's sequence held exactly the prefilled KV after every load. */
  sameState: boolean;
  diskResumeMs: number;
  diskRatio: number;
  /** The engine's hot turn and node-llama-cpp's turn of the same tokens, medians, and their ratio. */
  hotTurnMs: number;
  plainTurnMs: number;
  turnRatio: number;
  /** The turns gave the same tokens both ways. */
  sameTurns: boolean;
  /** The engine's save of a turn's KV (write-behind, after the reply; it waits for the closing tokens to go in), median. */
  saveMs: number;
}

const now = () => performance.now();

async function prefill(sequence: LlamaContextSequence, tokens: Token[]): Promise<number> {
  const started = now();
  for (let at = 0; at < tokens.length; at += 512) {
    await sequence.evaluateWithoutGeneratingNewTokens(tokens.slice(at, at + 512));
    if (tokens.length > 2048)
      process.stdout.write(
        `\r  prefill ${tokens.length}: ${Math.min(tokens.length, at + 512)} tokens, ${((now() - started) / 1000).toFixed(0)} s`,
      );
  }
  if (tokens.length > 2048) process.stdout.write('\n');
  return now() - started;
}

/**
 * node-llama-cpp's own turn, as the engine runs one: prompt and greedy reply. The rest and the closing tokens
 * come back to be evaluated after the answer (`closing`), as the engine does.
 */
async function plainTurn(
  sequence: LlamaContextSequence,
  model: LlamaModel,
  prompt: Token[],
  close: readonly Token[],
): Promise<{ added: Token[]; closing: () => Promise<void> }> {
  const before = sequence.contextTokens.length;
  const reply: Token[] = [];
  for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
    if (model.isEogToken(token)) break;
    reply.push(token);
    if (reply.length >= TURN_MAX_TOKENS) break;
  }
  const added = [...prompt, ...reply];
  const rest = [...added.slice(sequence.contextTokens.length - before), ...close];
  return { added: [...added, ...close], closing: () => sequence.evaluateWithoutGeneratingNewTokens(rest) };
}

async function main(): Promise<void> {
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const file = modelFile();
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: file });
  const info = modelInfoFromMetadata(model.fileInfo.metadata);
  // The turns' room, within what the model was trained for (8k is 8,000 tokens so that they fit).
  const contextSize = Math.min(info.trainedContextLength, Math.max(...sizes) + TURN_ROOM * repeats);
  if (contextSize < Math.max(...sizes) + TURN_ROOM * repeats)
    throw new Error(`${repeats} turns past ${Math.max(...sizes)} tokens do not fit the model's ${contextSize}`);
  const shape: SequenceStateShape = {
    layers: info.shape.layers,
    kvHeads: info.shape.kvHeads,
    headDim: info.shape.headDim,
    kType: 'f16',
    vType: 'f16',
  };
  // node-llama-cpp alone, set up as the engine sets up its own context.
  const plain: LlamaContext = await model.createContext({
    contextSize,
    sequences: 1,
    flashAttention: true,
    experimentalKvCacheKeyType: 'F16',
    experimentalKvCacheValueType: 'F16',
    swaFullCache: true,
    threads,
  });
  const engine = await LlamaEngine.open({ contextLength: contextSize, hotContexts: 1, threads });
  const format = chatMlTurnFormat(model);
  const blocks = Math.ceil(contextSize / 16) + 1;
  const pool = new NativeAllocator({ shape: info.shape, blockCount: blocks, hostBlockCount: blocks, backend: 'cpu' });
  const coldDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-engine-bench-'));
  const cold = await ColdStore.open({ directory: coldDir, keyRing: new KeyRing([{ id: 'bench', key: randomBytes(32) }], 'bench') });
  const diskPool = new NativeAllocator({ shape: info.shape, blockCount: blocks, hostBlockCount: blocks, backend: 'cpu' });
  const tiers = new TieredMemory({ pool: diskPool, cold, deviceLowWatermark: 0, hostLowWatermark: 0 });
  const assembly = createMemoryFile('kvfabric-bench-assembly');
  const bytesPerToken = pool.layout.bytesPerToken;
  console.log(
    `model ${path.basename(file)} (${(await sha256File(file)).slice(0, 12)}), ${bytesPerToken} bytes/token, flash attention on, ${threads} thread(s), states via ${stateDir}, ${loadRepeats} loads and ${repeats} turns and disk resumes per size`,
  );

  const text = Array.from({ length: 2000 }, (_, i) => `Agent ${i % 17} stored block ${i} of its context in tier ${i % 3}.`).join(' ');
  const allTokens = model.tokenize(text);
  if (allTokens.length < Math.max(...sizes)) throw new Error(`the bench text has only ${allTokens.length} tokens`);
  const prompt = format.prompt(TURN_MESSAGE, false, undefined);

  const rows: EngineResumeRow[] = [];
  for (const n of sizes) {
    console.log(`\n${n} tokens:`);
    const tokens = allTokens.slice(0, n);
    let sequence = plain.getSequence();
    const prefillMs = await prefill(sequence, tokens);
    const statePath = path.join(stateDir, `kvfabric-bench-${process.pid}.ggsq`);
    await sequence.saveStateToFile(statePath);
    await sequence.dispose();
    const saved = parseSequenceState(fs.readFileSync(statePath), shape);
    const handle = pool.createContext(1);
    pool.append(handle, saved.kv);
    await pool.demote(handle); // from host, as a suspended agent's pages are
    const stored = (into: NativeAllocator, ctx: number, ids: Uint32Array, storedTokens = ids.length): StoredContext => ({
      tokens: ids,
      storedTokens,
      fingerprint: engine.fingerprint,
      writeKv: (memoryFile, pieces) => into.writePlaneMajorAsync(ctx, memoryFile, 0, storedTokens, pieces),
    });
    const pieces = sequenceStatePieces(saved.tokens, shape, { vTransposed: false, streams: 1, stream: 0, seqId: 0 });

    // ---- loads, alternated: llama.cpp's own, the engine's from pages, and the layout alone ----
    // The engine's first load grows its memory file (fresh pages, once per engine): timed, reported apart.
    await engine.release('bench');
    let t0 = now();
    await engine.load('bench', stored(pool, handle, saved.tokens));
    const firstLoadMs = now() - t0;
    const back = await engine.save('bench', 0);
    const sameState = Buffer.from(back.kv).equals(Buffer.from(saved.kv));
    const own: number[] = [];
    const fromPages: number[] = [];
    const assembled: number[] = [];
    for (let r = 0; r < loadRepeats; r++) {
      sequence = plain.getSequence();
      t0 = now();
      await sequence.loadStateFromFile(statePath, { acceptRisk: true });
      own.push(now() - t0);
      await sequence.dispose();

      await engine.release('bench');
      t0 = now();
      const from = await engine.load('bench', stored(pool, handle, saved.tokens));
      fromPages.push(now() - t0);
      if (from !== 'stored') throw new Error(`the engine loaded ${from}, not from the pages`);

      t0 = now();
      await pool.writePlaneMajorAsync(handle, assembly, 0, n, pieces);
      assembled.push(now() - t0);
      console.log(
        `  load ${r + 1}/${loadRepeats}: llama.cpp's own ${own.at(-1)!.toFixed(1)} ms, from pages ${fromPages.at(-1)!.toFixed(1)} ms (layout alone ${assembled.at(-1)!.toFixed(1)} ms)`,
      );
    }

    // ---- the same from kvfabric's disk tier ----
    const fromDisk: number[] = [];
    tiers.create('context', 1);
    await tiers.append('context', saved.kv);
    for (let r = 0; r < repeats; r++) {
      await tiers.demote('context', 'disk');
      dropPageCache();
      await engine.release('bench');
      const t0 = now();
      await tiers.promote('context');
      await engine.load('bench', {
        tokens: saved.tokens,
        fingerprint: engine.fingerprint,
        writeKv: (memoryFile, p) => tiers.writePlaneMajor('context', memoryFile, n, p),
      });
      fromDisk.push(now() - t0);
    }
    await tiers.release('context');

    // ---- turns: the engine's hot turn against node-llama-cpp's, same tokens, alternated ----
    await engine.release('bench');
    await engine.load('bench', stored(pool, handle, saved.tokens));
    sequence = plain.getSequence();
    await sequence.loadStateFromFile(statePath, { acceptRisk: true });
    let ids = Uint32Array.from(saved.tokens);
    const hot: number[] = [];
    const plainTurns: number[] = [];
    const saves: number[] = [];
    let sameTurns = true;
    for (let r = 0; r < repeats; r++) {
      let t0 = now();
      const turn = await engine.turn({
        key: 'bench',
        context: stored(pool, handle, ids, n),
        input: TURN_MESSAGE,
        generation: { maxTokens: TURN_MAX_TOKENS },
      });
      hot.push(now() - t0);
      if (turn.resumedFrom !== 'hot') throw new Error(`the engine's turn was ${turn.resumedFrom}, not hot`);
      // The save first: it waits for the turn's closing tokens, which must not share the CPU with the plain turn.
      const before = ids.length;
      ids = Uint32Array.from([...ids, ...turn.added]);
      t0 = now();
      await engine.save('bench', before);
      saves.push(now() - t0);
      t0 = now();
      const plain = await plainTurn(sequence, model, prompt, format.close);
      plainTurns.push(now() - t0);
      await plain.closing();
      sameTurns &&= plain.added.join() === Array.from(turn.added).join();
      console.log(
        `  turn ${r + 1}/${repeats}: engine ${hot.at(-1)!.toFixed(1)} ms, node-llama-cpp ${plainTurns.at(-1)!.toFixed(1)} ms, save after it (its closing tokens first) ${saves.at(-1)!.toFixed(1)} ms`,
      );
    }
    await sequence.dispose();
    await engine.release('bench');
    pool.release(handle);
    fs.rmSync(statePath, { force: true });

    const resumeMs = median(fromPages);
    const row: EngineResumeRow = {
      tokens: n,
      kvBytes: n * bytesPerToken,
      prefillMs,
      llamaLoadMs: median(own),
      resumeMs,
      firstLoadMs,
      assembleMs: median(assembled),
      loadRatio: resumeMs / median(own),
      ratio: prefillMs / resumeMs,
      sameState,
      diskResumeMs: median(fromDisk),
      diskRatio: prefillMs / median(fromDisk),
      hotTurnMs: median(hot),
      plainTurnMs: median(plainTurns),
      turnRatio: median(hot) / median(plainTurns),
      sameTurns,
      saveMs: median(saves),
    };
    rows.push(row);
    console.log(
      `  ${n} tokens: prefill ${(prefillMs / 1000).toFixed(2)} s, pages to a ready sequence ${resumeMs.toFixed(1)} ms (${row.ratio.toFixed(0)}x prefill, ${row.loadRatio.toFixed(2)}x llama.cpp's own load), hot turn ${row.turnRatio.toFixed(3)}x node-llama-cpp's`,
    );
  }

  console.log('');
  printTable(
    [
      'tokens',
      'KV',
      'prefill',
      `llama.cpp load (median of ${loadRepeats})`,
      'pages to ready sequence',
      'first load',
      'layout alone',
      'vs llama.cpp load',
      'prefill / resume',
      'from disk',
      'prefill / disk',
      'same KV',
      'hot turn',
      'node-llama-cpp turn',
      'turn ratio',
      'same turns',
      'save after a turn (write-behind; the closing tokens first)',
    ],
    rows.map((r) => [
      String(r.tokens),
      `${(r.kvBytes / 2 ** 20).toFixed(1)} MiB`,
      `${(r.prefillMs / 1000).toFixed(2)} s`,
      `${r.llamaLoadMs.toFixed(1)} ms`,
      `${r.resumeMs.toFixed(1)} ms`,
      `${r.firstLoadMs.toFixed(1)} ms`,
      `${r.assembleMs.toFixed(1)} ms`,
      `${r.loadRatio.toFixed(2)}x`,
      `${r.ratio.toFixed(0)}x`,
      `${r.diskResumeMs.toFixed(1)} ms`,
      `${r.diskRatio.toFixed(0)}x`,
      String(r.sameState),
      `${r.hotTurnMs.toFixed(1)} ms`,
      `${r.plainTurnMs.toFixed(1)} ms`,
      `${r.turnRatio.toFixed(3)}x`,
      String(r.sameTurns),
      `${r.saveMs.toFixed(1)} ms`,
    ]),
  );
  if (jsonPath) {
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
    fs.writeFileSync(jsonPath, JSON.stringify({ threads, rows }, null, 2));
  }
  assembly.close();
  pool.close();
  diskPool.close();
  await cold.close();
  fs.rmSync(coldDir, { recursive: true, force: true });
  await engine.close();
  await plain.dispose();
  await model.dispose();
  await llama.dispose();
  if (rows.some((r) => !r.sameState || !r.sameTurns)) process.exitCode = 1;
}

void main();
