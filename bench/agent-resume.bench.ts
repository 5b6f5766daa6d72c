// Resume through Temporal with a real model (the llama engine's default, SmolLM2-135M, on this machine's
// CPU) against re-prefilling the same context with the same model, in one run. For each context size an
// agent's first turn is a message of about that many tokens (its prefill, timed through the turn update,
// one reply token); then, from host memory and from disk, the agent is suspended and resumed (timed: the
// resume update until its result, which includes the worker loading the context from kvfabric's pages into
// the engine) and takes one more one-token turn, reported apart: resume + that turn is "back to a ready
// sequence that has answered". A hot turn of the same size is measured too.
// Against the plain engine, in the same process: node-llama-cpp alone (same model file, threads, context
// size, flash attention, K/V f16, the engine's own ChatML turn format) takes the same turns of the same
// tokens, each right after the agent's once its write-behind (save, append, durable copy) has run, so the
// two never share the CPU, with no kvfabric, no Temporal and no save. With one resident
// update round trip (a pin and an unpin of the resident agent: one holder activity each that touches no
// KV and no model), that judges the target "a hot turn through Temporal costs at most 1.05x the plain
// engine's same turn plus one resident update round trip" from one run, pair by pair: each hot turn
// against the plain turn and the round trip measured right after it, the median of the differences
// deciding (this VM's speed drifts between the pairs, so the medians of separate columns can come from
// different speeds).
//   npm run bench:agent -- [--tokens 512,2k,8k] [--repeats 3] [--json FILE]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { LlamaContext, LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp';

import type { AgentHandle } from '../src/client/agent-client';
import { chatMlTurnFormat, type ChatTurnFormat } from '../src/engines/llama/chat-turn';
import { modelFile } from '../src/engines/llama/default-model';
import { readModelInfo } from '../src/engines/llama/gguf-shape';
import { loadNodeLlamaCpp } from '../src/engines/llama/node-llama-cpp';
import { bytesPerTokenOf } from '../src/fabric/layout';
import { startAgentRig } from './agent-rig';
import { median, modelContextSizes, option, printTable, signedMs } from './measure';

const sizes = modelContextSizes(option('--tokens') ?? '512,2k,8k');
const repeats = Number(option('--repeats') ?? '3');
/** Hot turns, each paired with a plain turn and a round trip: a few seconds a pair at most, so at least 9 of them. */
const turnRepeats = Math.max(repeats, 9);
/**
 * Resumes from host cost a suspend, a resume and a one-token turn (a fraction of a second to 1.5 s): at
 * least 9, for the median their target is judged on. From disk (no target) the asked repeats.
 */
const resumeRepeats = { host: Math.max(repeats, 9), disk: repeats } as const;
const jsonPath = option('--json');
/** The model's trained context: an 8k context plus the probe turns fit. */
const CONTEXT_LENGTH = 8192;
const ONE_TOKEN = { maxTokens: 1 };
const PROBE = 'Go on.';
/**
 * Model turns take seconds to minutes on two cores: no idle timer within the run. No prefix sharing: each
 * size's prefill is the re-prefill a resume is judged against, and the sizes' messages begin alike, so with
 * sharing the 2k agent's first turn took the 512 agent's blocks (9.2 s instead of 16-21 s for its prompt).
 */
const CONFIG = {
  timers: { idleToWarmMs: 3_600_000, warmToColdMs: 3_600_000 },
  timeouts: { attemptMs: 900_000, operationMs: 1_800_000 },
  sharing: 'none' as const,
};
/** The llama engine's default threads (all cores but one), which the rig's worker runs with. */
const THREADS = Math.max(1, os.availableParallelism() - 1);
/** The target's allowance on the plain engine's turn, before the round trip is added. */
const HOT_TURN_FACTOR = 1.05;

export interface AgentResumeRow {
  /** The context size asked for (the library bench's row of the same size is its reference). */
  size: number;
  /** The context's length after its resumes and probe turns. */
  tokens: number;
  /** The KV of those tokens (a resume from host moves none of it to the device on its path). */
  kvBytes: number;
  prefillMs: number;
  hotTurnMs: number;
  from: 'host' | 'disk';
  resumeMs: number;
  /** Of the resume, the worker's load of the context into the engine (median). */
  engineLoadMs: number;
  /** The one-token turn right after the resume: the engine holds the context hot already. */
  firstTurnMs: number;
  /** prefill / (resume + first turn). */
  ratio: number;
  /**
   * The first resume of this size, apart from the median: the engine's memory file grows to the state's
   * size then (fresh pages, once per engine), as the library bench's first load does.
   */
  firstResumeMs: number;
  /** Resumes in the median. */
  repeats: number;
}

/** A hot turn through Temporal against the plain engine's same turn, at one context size. */
export interface HotTurnRow {
  /** The context size asked for. */
  size: number;
  /** The agent's context before its hot turns. */
  tokens: number;
  /** Whether the plain sequence held as many tokens as the agent's context after the same turns. */
  sameTokens: boolean;
  /** The agent's first turn (its prefill) through Temporal, and the plain engine's same turn. */
  prefillMs: number;
  plainPrefillMs: number;
  /** A one-token turn through Temporal: the turn update sent until its result, everything a turn pays included. */
  hotTurnMs: number;
  /** The plain engine's same turn: prompt, one reply token, closing tokens. */
  plainTurnMs: number;
  /** A pin or unpin update of the resident agent: one holder activity, no KV, no model (median). */
  roundTripMs: number;
  /** HOT_TURN_FACTOR x plainTurnMs + roundTripMs, of the medians. */
  boundMs: number;
  /** hotTurnMs / plainTurnMs. */
  overhead: number;
  /** Each hot turn with the plain turn and the round trip (the mean of a pin and an unpin) right after it. */
  pairs: HotTurnPair[];
  /** Over the pairs, the median of hot turn - (HOT_TURN_FACTOR x plain turn + round trip): the target's judge. */
  overBoundMs: number;
  /** overBoundMs <= 0. */
  withinTarget: boolean;
  repeats: number;
}

export interface HotTurnPair {
  hotMs: number;
  plainMs: number;
  roundTripMs: number;
}

/** node-llama-cpp alone, set up as the llama engine sets up its context; no kvfabric anywhere. */
interface PlainEngine {
  model: LlamaModel;
  context: LlamaContext;
  format: ChatTurnFormat;
  close(): Promise<void>;
}

async function openPlainEngine(): Promise<PlainEngine> {
  const nlc = await loadNodeLlamaCpp();
  const llama = await nlc.getLlama({ gpu: false, build: 'never', logLevel: nlc.LlamaLogLevel.error, progressLogs: false });
  const model = await llama.loadModel({ modelPath: modelFile() });
  // The engine's settings (src/engines/llama/llama-engine.ts): two sequences, as its default hot contexts.
  const context = await model.createContext({
    contextSize: CONTEXT_LENGTH,
    sequences: 2,
    flashAttention: true,
    experimentalKvCacheKeyType: 'F16',
    experimentalKvCacheValueType: 'F16',
    swaFullCache: true,
    threads: THREADS,
  });
  if (!context.flashAttention) throw new Error('llama.cpp gave the plain engine no flash attention');
  return {
    model,
    context,
    format: chatMlTurnFormat(model),
    async close() {
      await context.dispose();
      await model.dispose();
    },
  };
}

/**
 * The llama engine's turn without kvfabric: evaluate the prompt and sample the reply. What is left and the
 * close come back to be evaluated after the answer, untimed, as the llama engine does (its hot sequences' tails).
 */
async function plainTurn(
  plain: PlainEngine,
  sequence: LlamaContextSequence,
  message: string,
  maxTokens: number,
): Promise<() => Promise<void>> {
  const before = sequence.contextTokens.length;
  const prompt = plain.format.prompt(message, before === 0, undefined);
  const reply: Token[] = [];
  for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
    if (plain.model.isEogToken(token)) break;
    reply.push(token);
    if (reply.length >= maxTokens) break;
  }
  const evaluated = sequence.contextTokens.length - before;
  return () => sequence.evaluateWithoutGeneratingNewTokens([...[...prompt, ...reply].slice(evaluated), ...plain.format.close]);
}

async function timed<T>(work: () => Promise<T>): Promise<[T, number]> {
  const started = performance.now();
  const value = await work();
  return [value, performance.now() - started];
}

/** The longest run of notes() the model's tokenizer makes at most `tokens` tokens of (bench/wake-up.bench.ts too). */
export function messageOf(model: LlamaModel, tokens: number): string {
  const length = (count: number) => model.tokenize(notes(count)).length;
  let count = Math.max(1, Math.floor(tokens / (length(40) / 40)));
  while (count > 1 && length(count) > tokens) count--;
  while (length(count + 1) <= tokens) count++;
  return notes(count);
}

/** Distinct sentences (no repetition a tokenizer could fold), `count` of them. */
function notes(count: number): string {
  const lines: string[] = [];
  for (let i = 0; i < count; i++)
    lines.push(`Inspection ${i + 1}: deck section ${(i * 7) % 97} passed on day ${(i * 13) % 31}, crew ${(i * 5) % 17}.`);
  return lines.join(' ');
}

async function main(): Promise<void> {
  console.log(
    `agent resume through Temporal vs re-prefill, and hot turns vs the plain engine, real model, sizes ${sizes.join(', ')}, ${turnRepeats} hot turns, ${resumeRepeats.host} resumes from host and ${resumeRepeats.disk} from disk (each after a first apart), ${THREADS} thread(s)`,
  );
  const rig = await startAgentRig({ name: 'agent-resume-bench', engine: 'llama', contextLength: CONTEXT_LENGTH, blocks: 2048 });
  const plain = await openPlainEngine();
  const kvBytesPerToken = bytesPerTokenOf((await readModelInfo(modelFile())).shape);
  const rows: AgentResumeRow[] = [];
  const turns: HotTurnRow[] = [];
  try {
    // What a first turn's chat template adds to its message, and what one probe turn adds to a context
    // (prompt, reply token, closing tokens); the probe agent's turns warm the worker too.
    const probe = await rig.agents.start({ agentId: 'probe', tenant: 'bench', config: CONFIG });
    const probeNotes = notes(40);
    const measured = await probe.turn({ message: probeNotes, generation: ONE_TOKEN });
    const templateTokens = measured.tokens - plain.model.tokenize(probeNotes).length;
    const perProbeTurn = (await probe.turn({ message: PROBE, generation: ONE_TOKEN })).tokens - measured.tokens;
    await probe.release();

    for (const size of sizes) {
      const agent: AgentHandle = await rig.agents.start({ agentId: `agent-${size}`, tenant: 'bench', config: CONFIG });
      const sequence = plain.context.getSequence();
      process.stdout.write(`  ${size} tokens: prefill through Temporal...`);
      // Room for the probe turns after the prefill: the hot turns, then a turn after each resume from host
      // and from disk (the first of each apart).
      const probeTurns = turnRepeats + resumeRepeats.host + 1 + resumeRepeats.disk + 1;
      const contextTokens = Math.min(size, CONTEXT_LENGTH - perProbeTurn * probeTurns - 16);
      const message = messageOf(plain.model, contextTokens - templateTokens);
      const [first, prefillMs] = await timed(() => agent.turn({ message, generation: ONE_TOKEN }));
      process.stdout.write(` ${(prefillMs / 1000).toFixed(1)} s (${first.tokens} tokens); plain prefill...`);
      const [closePrefill, plainPrefillMs] = await timed(() => plainTurn(plain, sequence, message, 1));
      await closePrefill();
      process.stdout.write(` ${(plainPrefillMs / 1000).toFixed(1)} s;`);

      // Alternated: the agent's hot turn, the plain engine's same turn, a pin, an unpin.
      const pairs: HotTurnPair[] = [];
      const roundTrips: number[] = [];
      for (let i = 0; i < turnRepeats; i++) {
        const hotMs = (await timed(() => agent.turn({ message: PROBE, generation: ONE_TOKEN })))[1];
        // The turn's save, append and durable copy run after its answer; the plain turn must not share the CPU with them.
        await rig.settled();
        const [closePlain, plainMs] = await timed(() => plainTurn(plain, sequence, PROBE, 1));
        await closePlain();
        const pinMs = (await timed(() => agent.pin()))[1];
        const unpinMs = (await timed(() => agent.unpin()))[1];
        roundTrips.push(pinMs, unpinMs);
        pairs.push({ hotMs, plainMs, roundTripMs: (pinMs + unpinMs) / 2 });
      }
      const afterHot = await agent.status();
      const hotTurnMs = median(pairs.map((p) => p.hotMs));
      const plainTurnMs = median(pairs.map((p) => p.plainMs));
      const roundTripMs = median(roundTrips);
      const boundMs = HOT_TURN_FACTOR * plainTurnMs + roundTripMs;
      const overBoundMs = median(pairs.map((p) => p.hotMs - (HOT_TURN_FACTOR * p.plainMs + p.roundTripMs)));
      turns.push({
        size,
        tokens: first.tokens,
        sameTokens: afterHot.tokens === sequence.contextTokens.length,
        prefillMs,
        plainPrefillMs,
        hotTurnMs,
        plainTurnMs,
        roundTripMs,
        boundMs,
        overhead: hotTurnMs / plainTurnMs,
        pairs,
        overBoundMs,
        withinTarget: overBoundMs <= 0,
        repeats: turnRepeats,
      });
      await sequence.dispose();
      process.stdout.write(
        ` hot ${hotTurnMs.toFixed(0)} ms, plain ${plainTurnMs.toFixed(0)} ms, round trip ${roundTripMs.toFixed(0)} ms (per pair, over the bound by ${overBoundMs.toFixed(0)} ms);\n   `,
      );

      for (const from of ['host', 'disk'] as const) {
        const resumes: number[] = [];
        const engineLoads: number[] = [];
        const firstTurns: number[] = [];
        let firstResumeMs = 0;
        for (let i = 0; i <= resumeRepeats[from]; i++) {
          await agent.suspend(from);
          const [resumed, resumeMs] = await timed(() => agent.resume());
          const firstTurnMs = (await timed(() => agent.turn({ message: PROBE, generation: ONE_TOKEN })))[1];
          if (i === 0) {
            firstResumeMs = resumeMs;
            continue;
          }
          resumes.push(resumeMs);
          engineLoads.push(resumed.lastResume?.engineLoadMs ?? 0);
          firstTurns.push(firstTurnMs);
        }
        const status = await agent.status();
        const resumeMs = median(resumes);
        const firstTurnMs = median(firstTurns);
        rows.push({
          size,
          tokens: status.tokens,
          kvBytes: status.tokens * kvBytesPerToken,
          prefillMs,
          hotTurnMs,
          from,
          resumeMs,
          engineLoadMs: median(engineLoads),
          firstTurnMs,
          ratio: prefillMs / (resumeMs + firstTurnMs),
          firstResumeMs,
          repeats: resumeRepeats[from],
        });
        process.stdout.write(` ${from} ${resumeMs.toFixed(0)} + ${firstTurnMs.toFixed(0)} ms;`);
      }
      process.stdout.write('\n');
      await agent.release();
    }
  } finally {
    await plain.close();
    await rig.close();
  }
  printTable(
    [
      'tokens',
      'KV',
      'from',
      'prefill (turn)',
      'resume update',
      'first resume (apart)',
      'first turn after',
      'hot turn',
      'prefill / (resume + first turn)',
    ],
    rows.map((r) => [
      String(r.tokens),
      `${(r.kvBytes / 2 ** 20).toFixed(1)} MiB`,
      r.from,
      `${(r.prefillMs / 1000).toFixed(2)} s`,
      `${r.resumeMs.toFixed(0)} ms`,
      `${r.firstResumeMs.toFixed(0)} ms`,
      `${r.firstTurnMs.toFixed(0)} ms`,
      `${r.hotTurnMs.toFixed(0)} ms`,
      `${r.ratio.toFixed(1)}x`,
    ]),
  );
  console.log('');
  printTable(
    [
      'tokens',
      'same tokens',
      'prefill (turn)',
      'plain prefill',
      'hot turn',
      'plain turn',
      'hot / plain',
      'round trip (pin)',
      `bound ${HOT_TURN_FACTOR}x plain + round trip`,
      'per pair: hot - bound (median)',
      'target',
    ],
    turns.map((t) => [
      String(t.tokens),
      String(t.sameTokens),
      `${(t.prefillMs / 1000).toFixed(2)} s`,
      `${(t.plainPrefillMs / 1000).toFixed(2)} s`,
      `${t.hotTurnMs.toFixed(0)} ms`,
      `${t.plainTurnMs.toFixed(0)} ms`,
      `${t.overhead.toFixed(2)}x`,
      `${t.roundTripMs.toFixed(0)} ms`,
      `${t.boundMs.toFixed(0)} ms`,
      signedMs(t.overBoundMs),
      t.withinTarget ? 'within' : 'over',
    ]),
  );
  if (jsonPath) {
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
    fs.writeFileSync(jsonPath, JSON.stringify({ threads: THREADS, rows, turns }, null, 2));
  }
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
