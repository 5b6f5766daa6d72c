// Resume: the time to bring a Llama-3-8B-shaped context (128 KiB of KV per token) back to the device,
// from the host tier and from the disk tier, two ways:
//   library   TieredMemory.restore alone (every block checked against its page checksum as it is copied,
//             the cold store's GCM tags; no digest);
//   temporal  a resume update sent by the client -> the restored context, checked against the digest its
//             workflow recorded, in its result, through a dev server and an in-process GPU worker
//             (scripts/measure-agent.ts's set-up), with the worker's own restore and verify times, and
//             the round trip of a resume that restores nothing (the context already resident); where a
//             second pair of pools fits, each resume follows one of the library's restores of the same
//             size in the same process (`libraryMs`), so the two are compared under the same conditions.
// Recomputing the same contexts (prefill of Llama-3-8B on an H200) took 264 ms (8k), 1.31 s (32k) and
// 11.3 s (128k), measured on an H200: the reference a resume must beat.
//   npx tsx bench/resume.bench.ts [--mode library|temporal] [--tokens 8k,32k] [--repeats 3] [--host-repeats N]
//     [--json FILE]
// --host-repeats (temporal; default --repeats): resumes from host and resident ones, which cost a fraction of
// a second each: their medians are judged within a few ms, and one round trip here varies by 10-20 ms.
// A context whose device and host pools would not both fit in memory (128k tokens are 16 GiB: ~40 GiB of
// RAM for both) is measured from disk only, the way another worker resumes it after a failover: one pool
// writes its durable copy and is closed, a second one (no host tier) adopts it from the manifest and
// restores it straight to the device. The default token list stops at 32k; pass --tokens 8k,32k,128k.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { AgentHandle } from '../src/client/agent-client';
import { NativeAllocator } from '../src/fabric';
import { ColdStore, KeyRing } from '../src/tiers/cold';
import { TieredMemory } from '../src/tiers/tiered-memory';
import { bytesPerTokenOf } from '../src/fabric/layout';
import { MODELS } from '../src/engines/models';
import { dropPageCache, median, option, printTable } from './measure';

const LLAMA = MODELS['llama-3-8b']!;
const BYTES_PER_TOKEN = bytesPerTokenOf(LLAMA.shape);
const TOKENS_PER_BLOCK = LLAMA.tokensPerBlock;
const MiB = 1024 * 1024;
/** Prefill on an H200 (the project's reference figures): what a resume saves. */
export const PREFILL_H200_MS: Record<number, number> = { 8192: 264, 32768: 1310, 131072: 11_300 };

export function parseTokens(text: string): number[] {
  return text.split(',').map((item) => {
    const match = /^(\d+)(k?)$/i.exec(item.trim());
    if (!match) throw new Error(`--tokens: "${item}" is not a token count like 8k or 8192`);
    return Number(match[1]) * (match[2] ? 1024 : 1);
  });
}

const tokenList = parseTokens(option('--tokens') ?? '8k,32k');
const mode = option('--mode') ?? 'library';
const repeats = Number(option('--repeats') ?? 3);
const hostRepeats = Number(option('--host-repeats') ?? repeats);
const jsonPath = option('--json');
const notes: string[] = [];

export interface ResumeRow {
  path: 'library' | 'temporal';
  tokens: number;
  bytes: number;
  /** 'resident': a resume update of a context already on the device, which restores nothing: the round trip. */
  from: 'host' | 'disk' | 'resident';
  /** Median over the repeats: end to end (temporal: update sent -> result; library: restore()). */
  totalMs: number;
  /** Temporal only: the worker's restore and verify times (medians of the same samples). */
  restoreMs?: number;
  verifyMs?: number;
  /** Temporal only: the library's restore of the same size, alternated with these resumes in one process. */
  libraryMs?: number;
  /** Temporal with the library alternated: each resume's total and the library's restore just before it. */
  pairs?: Array<{ totalMs: number; libraryMs: number }>;
  repeats: number;
}

/** Distinct random bytes, cycled in 64 MiB chunks: nothing compresses or dedups. */
const CHUNK_TOKENS = (64 * MiB) / BYTES_PER_TOKEN;
let randomChunk: Buffer | undefined;
function chunkOfRandomBytes(): Buffer {
  randomChunk ??= randomBytes(CHUNK_TOKENS * BYTES_PER_TOKEN);
  return randomChunk;
}

interface LibraryContext {
  /** Offloads the context to `from`, then times TieredMemory.restore (ms). */
  restoreFrom(from: 'host' | 'disk'): Promise<number>;
  close(): Promise<void>;
}

/** One context of `tokens` in its own pool (device and host tiers) and cold store. */
async function libraryContext(tokens: number): Promise<LibraryContext> {
  const blocks = Math.ceil(tokens / TOKENS_PER_BLOCK);
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-resume-bench-'));
  const pool = new NativeAllocator({ shape: LLAMA.shape, tokensPerBlock: TOKENS_PER_BLOCK, blockCount: blocks, hostBlockCount: blocks });
  const cold = await ColdStore.open({ directory, keyRing: new KeyRing([{ id: 'bench', key: randomBytes(32) }], 'bench') });
  const memory = new TieredMemory({ pool, cold });
  const close = async () => {
    await cold.close();
    pool.close();
    fs.rmSync(directory, { recursive: true, force: true });
  };
  try {
    memory.create('agent', 1);
    const chunk = chunkOfRandomBytes();
    for (let done = 0; done < tokens; done += CHUNK_TOKENS) {
      await memory.append('agent', chunk.subarray(0, Math.min(CHUNK_TOKENS, tokens - done) * BYTES_PER_TOKEN));
    }
  } catch (err) {
    await close();
    throw err;
  }
  return {
    async restoreFrom(from) {
      await memory.demote('agent', from);
      if (from === 'disk' && !dropPageCache()) noteOnce('could not drop the page cache (needs root): disk restores may read from memory');
      const started = performance.now();
      await memory.promote('agent');
      return performance.now() - started;
    },
    close,
  };
}

async function libraryRows(): Promise<ResumeRow[]> {
  const rows: ResumeRow[] = [];
  for (const tokens of tokenList) {
    if (2 * tokens * BYTES_PER_TOKEN > 0.7 * os.totalmem()) {
      rows.push(await adoptedFromDisk(tokens, chunkOfRandomBytes(), CHUNK_TOKENS));
      continue;
    }
    const context = await libraryContext(tokens);
    try {
      for (const from of ['host', 'disk'] as const) {
        const samples: number[] = [];
        for (let i = 0; i < repeats; i++) samples.push(await context.restoreFrom(from));
        rows.push({ path: 'library', tokens, bytes: tokens * BYTES_PER_TOKEN, from, totalMs: median(samples), repeats });
        console.log(`library   ${label(tokens)} from ${from}: ${median(samples).toFixed(0)} ms`);
      }
    } finally {
      await context.close();
    }
  }
  return rows;
}

/**
 * Disk -> device for a context too big for device plus host pools here: written by one pool (closed
 * before the restore), adopted by a second pool without a host tier, restored straight to the device.
 */
async function adoptedFromDisk(tokens: number, chunk: Buffer, chunkTokens: number): Promise<ResumeRow> {
  const blocks = Math.ceil(tokens / TOKENS_PER_BLOCK);
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-resume-bench-'));
  const cold = await ColdStore.open({ directory, keyRing: new KeyRing([{ id: 'bench', key: randomBytes(32) }], 'bench') });
  const newPool = () => new NativeAllocator({ shape: LLAMA.shape, tokensPerBlock: TOKENS_PER_BLOCK, blockCount: blocks });
  noteOnce(
    `${label(tokens)}: device and host pools do not both fit in ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB here; measured from disk only, adopted by a second pool as after a failover`,
  );
  try {
    const writer = newPool();
    try {
      const memory = new TieredMemory({ pool: writer, cold });
      memory.create('agent', 1);
      for (let done = 0; done < tokens; done += chunkTokens) {
        await memory.append('agent', chunk.subarray(0, Math.min(chunkTokens, tokens - done) * BYTES_PER_TOKEN));
      }
      await memory.spill('agent');
    } finally {
      writer.close(); // its memory goes back before the reader's pool fills
    }
    const samples: number[] = [];
    const pool = newPool();
    try {
      const memory = new TieredMemory({ pool, cold });
      // A running worker's pool memory is committed already; a fresh mapping's first touch costs about
      // 0.5 GB/s on this VM, which is not a restore's cost: fill the pool once before timing.
      memory.create('warm-up', 1);
      for (let done = 0; done < tokens; done += chunkTokens) {
        await memory.append('warm-up', chunk.subarray(0, Math.min(chunkTokens, tokens - done) * BYTES_PER_TOKEN));
      }
      await memory.release('warm-up');
      for (let i = 0; i < repeats; i++) {
        await memory.recover('agent');
        if (!dropPageCache()) noteOnce('could not drop the page cache (needs root): disk restores may read from memory');
        const started = performance.now();
        await memory.promote('agent');
        samples.push(performance.now() - started);
        await memory.dropLocalCopy('agent'); // the manifest and segments stay for the next repeat
      }
    } finally {
      pool.close();
    }
    console.log(`library   ${label(tokens)} from disk (adopted): ${median(samples).toFixed(0)} ms`);
    return { path: 'library', tokens, bytes: tokens * BYTES_PER_TOKEN, from: 'disk', totalMs: median(samples), repeats };
  } finally {
    await cold.close();
    fs.rmSync(directory, { recursive: true, force: true });
  }
}

async function temporalRows(): Promise<ResumeRow[]> {
  const { startAgentRig } = await import('./agent-rig');
  const rows: ResumeRow[] = [];
  // A worker holds device and host pools of the context's size: sizes that do not fit are left out.
  const fitting = tokenList.filter((tokens) => 2 * tokens * BYTES_PER_TOKEN <= 0.7 * os.totalmem());
  for (const tokens of tokenList.filter((t) => !fitting.includes(t))) {
    noteOnce(
      `temporal: ${label(tokens)} left out: a worker's device and host pools of that size do not fit in ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB here`,
    );
  }
  if (fitting.length === 0) return rows;
  const blocks = Math.ceil(Math.max(...fitting) / TOKENS_PER_BLOCK) + 64;
  // The library's restore of the same size in the same process, alternated with the worker's resumes,
  // where a second pair of pools fits: the ratio then compares the two under the same conditions (this
  // VM's memory bandwidth drifts by a third from one process to the next).
  const pairs = (tokens: number) => 2 * blocks * TOKENS_PER_BLOCK * BYTES_PER_TOKEN + 2 * tokens * BYTES_PER_TOKEN <= 0.7 * os.totalmem();
  const { agents, close } = await startAgentRig({ name: 'resume-bench', model: LLAMA, blocks });
  const hours = { timers: { idleToWarmMs: 3_600_000, warmToColdMs: 3_600_000 } };
  try {
    for (const tokens of fitting) {
      const agent = await agents.start({ agentId: `resume-${tokens}`, tenant: 'bench', model: LLAMA, config: hours });
      for (let done = 0; done < tokens; done += 1024) await agent.turn(Math.min(1024, tokens - done));
      // The update's own round trip through the server and the worker: a resume that restores nothing.
      const roundTrips: number[] = [];
      for (let i = 0; i < Math.max(hostRepeats, 5); i++) {
        const started = performance.now();
        await agent.resume();
        roundTrips.push(performance.now() - started);
      }
      rows.push({
        path: 'temporal',
        tokens,
        bytes: tokens * BYTES_PER_TOKEN,
        from: 'resident',
        totalMs: median(roundTrips),
        repeats: roundTrips.length,
      });
      console.log(`temporal  ${label(tokens)} resident (round trip): ${median(roundTrips).toFixed(0)} ms`);
      const library = pairs(tokens) ? await libraryContext(tokens) : undefined;
      if (!library)
        noteOnce(`temporal: ${label(tokens)}: no room for the library's pools beside the worker's; compare with the library run`);
      try {
        for (const from of ['host', 'disk'] as const) rows.push(await temporalRow(agent, library, tokens, from));
      } finally {
        await library?.close();
      }
      await agent.release();
    }
  } finally {
    await close();
  }
  return rows;
}

/** Resumes from `from` through Temporal, each after one of the library's restores when it is given. */
async function temporalRow(
  agent: AgentHandle,
  library: LibraryContext | undefined,
  tokens: number,
  from: 'host' | 'disk',
): Promise<ResumeRow> {
  const samples: Array<{ total: number; restore: number; verify: number }> = [];
  const librarySamples: number[] = [];
  const count = from === 'host' ? hostRepeats : repeats;
  for (let i = 0; i < count; i++) {
    if (library) librarySamples.push(await library.restoreFrom(from));
    await agent.suspend(from);
    if (from === 'disk') dropPageCache();
    const started = performance.now();
    const status = await agent.resume();
    const total = performance.now() - started;
    const restored = status.lastResume!;
    if (restored.from !== from) throw new Error(`resume of ${tokens} tokens from ${from}: ${JSON.stringify(restored)}`);
    samples.push({ total, restore: restored.transferMs, verify: restored.verifyMs });
  }
  const row: ResumeRow = {
    path: 'temporal',
    tokens,
    bytes: tokens * BYTES_PER_TOKEN,
    from,
    totalMs: median(samples.map((s) => s.total)),
    restoreMs: median(samples.map((s) => s.restore)),
    verifyMs: median(samples.map((s) => s.verify)),
    ...(library
      ? { libraryMs: median(librarySamples), pairs: samples.map((sample, i) => ({ totalMs: sample.total, libraryMs: librarySamples[i]! })) }
      : {}),
    repeats: count,
  };
  const paired = row.libraryMs === undefined ? '' : `; the library's, alternated with it: ${row.libraryMs.toFixed(0)} ms`;
  console.log(
    `temporal  ${label(tokens)} from ${from}: ${row.totalMs.toFixed(0)} ms (worker: restore ${row.restoreMs!.toFixed(0)} + verify ${row.verifyMs!.toFixed(0)} ms${paired})`,
  );
  return row;
}

function label(tokens: number): string {
  return `${tokens / 1024}k tokens (${((tokens * BYTES_PER_TOKEN) / 2 ** 30).toFixed(2)} GiB)`;
}

function noteOnce(note: string): void {
  if (!notes.includes(note)) notes.push(note);
}

async function main(): Promise<void> {
  console.log(
    `resume benchmark (${mode}): Llama-3-8B shape, ${BYTES_PER_TOKEN / 1024} KiB per token, tokens ${tokenList.join(', ')}, median of ${repeats}${mode === 'temporal' ? ` (from host and resident: ${Math.max(hostRepeats, 5)})` : ''}`,
  );
  const rows = mode === 'temporal' ? await temporalRows() : await libraryRows();
  console.log();
  printTable(
    ['path', 'context', 'from', 'resume', 'worker restore + verify', 'H200 prefill'],
    rows.map((r) => [
      r.path,
      label(r.tokens),
      r.from,
      `${r.totalMs.toFixed(0)} ms`,
      r.restoreMs === undefined ? '-' : `${r.restoreMs.toFixed(0)} + ${r.verifyMs!.toFixed(0)} ms`,
      PREFILL_H200_MS[r.tokens] === undefined ? '-' : `${PREFILL_H200_MS[r.tokens]} ms`,
    ]),
  );
  for (const note of notes) console.log(`note: ${note}`);
  if (jsonPath !== undefined) {
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
    fs.writeFileSync(jsonPath, JSON.stringify({ mode, tokens: tokenList, repeats, bytesPerToken: BYTES_PER_TOKEN, rows, notes }, null, 2));
  }
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
