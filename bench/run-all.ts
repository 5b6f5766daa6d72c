// Every benchmark in one command (npm run bench:all): allocator, host tier, disk tier, resume (library
// alone and through Temporal), memory, resume vs prefill with a real model (engine-resume: the
// library; agent-resume: through Temporal), the first call after a planned pause (wake-up), and agents of one
// tenant sharing a prompt prefix (prefix-sharing), the tier in an object store (s3-tier). Each runs in its
// own process (so one's pools are gone before the next allocates), writes its JSON, and this collects them
// with the machine's description into
// build/bench/results.json, prints one table and writes it as Markdown (build/bench/results.md) for
// docs/benchmarks.md, and draws resume against re-prefill by context length into docs/resume-vs-prefill.svg
// (bench/chart.ts; `npm run bench:chart -- build/bench/results.json` redraws it from a saved run).
//   npm run bench:all -- [--tokens 8k,32k] [--repeats 3] [--out build/bench]
// --tokens: resume context sizes (default 8k,32k,128k); a size whose device and host pools do not both
// fit in memory (128k: 16 GiB each) is measured from disk only, through the library (resume.bench.ts).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { AgentResumeRow, HotTurnRow } from './agent-resume.bench';
import type { AiSdkLoopRow } from './ai-sdk-loop.bench';
import type { EngineResumeRow } from './engine-resume.bench';
import type { PrefixSharingResult } from './prefix-sharing.bench';
import { s3TierRows, type S3TierResult } from './s3-tier.bench';
import type { WakeUpRow } from './wake-up.bench';
import { RESUME_CHART_FILE, subtitleOf, writeResumeChart } from './chart';
import { median, option, printTable, signedMs } from './measure';

const tokens = option('--tokens') ?? '8k,32k,128k';
const repeats = option('--repeats') ?? '3';
const outDir = option('--out') ?? path.join('build', 'bench');
const GPU_NOTE = 'not measured: no CUDA device';
/** Prefill of Llama-3-8B on an H200 (the project's reference figures). */
const PREFILL_H200_MS: Record<number, number> = { 8192: 264, 32768: 1310, 131072: 11_300 };

/** The run() calls in main(), for the `[i/N]` progress lines: keep it equal to their number. */
const BENCHMARK_COUNT = 13;
let benchmarksStarted = 0;

function run(name: string, file: string, benchArgs: string[]): unknown {
  const json = path.join(outDir, `${name}.json`);
  console.log(`\n[${++benchmarksStarted}/${BENCHMARK_COUNT}] ${name} ... (${file} ${benchArgs.join(' ')})`);
  const started = Date.now();
  const result = spawnSync(process.execPath, ['--import', 'tsx', path.join(__dirname, file), ...benchArgs, '--json', json], {
    stdio: 'inherit',
  });
  if (result.status !== 0) throw new Error(`${name} failed (${result.signal ?? result.status})`);
  console.log(`[${benchmarksStarted}/${BENCHMARK_COUNT}] ${name}: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return JSON.parse(fs.readFileSync(json, 'utf8'));
}

function machine(gpu: string) {
  const lscpu = spawnSync('lscpu', { encoding: 'utf8' }).stdout ?? '';
  return {
    cpu: os.cpus()[0]?.model ?? 'unknown',
    cores: os.availableParallelism(),
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    os: `${os.type()} ${os.release()}`,
    arch: os.arch(),
    node: process.version,
    hypervisor: /Hypervisor vendor:\s*(.+)/.exec(lscpu)?.[1]?.trim() ?? null,
    gpu,
  };
}

const rate = (perSecond: number) => (perSecond >= 1e6 ? `${(perSecond / 1e6).toFixed(2)} M/s` : `${(perSecond / 1e3).toFixed(1)} k/s`);
const ms = (value: number) => (value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${value.toFixed(0)} ms`);
const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(2)} GiB`;
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

interface AllocatorJson {
  results: Array<{ scenario: string; native: number; ts: number; ratio: number }>;
}
interface TiersJson {
  bytes: number;
  rounds: number;
  bestGBps: { demote: number; promote: number; memcpy: number; demoteUnverified: number; promoteUnverified: number };
  checksumShare: { demote: number; promote: number };
}
interface ColdJson {
  dataBytes: number;
  median: { rawWrite: number; storeWrite: number; rawRead: number; storeRead: number };
  ratio: { write: number; read: number };
  notes: string[];
}
interface ResumeJson {
  rows: Array<{
    path: string;
    tokens: number;
    bytes: number;
    from: string;
    totalMs: number;
    restoreMs?: number;
    verifyMs?: number;
    libraryMs?: number;
    pairs?: Array<{ totalMs: number; libraryMs: number }>;
  }>;
  notes: string[];
}
interface TransferJson {
  skipped?: string;
  deviceName?: string;
  figures?: Array<{
    way: string;
    direction: string;
    blockBytes: number;
    gbps?: number;
    ratio?: number;
    target: number;
    meets?: boolean;
    ceilingGBps: number;
  }>;
}
interface EngineResumeJson {
  threads: number;
  rows: EngineResumeRow[];
}
interface AgentResumeJson {
  threads: number;
  turns: HotTurnRow[];
  rows: AgentResumeRow[];
}
interface AiSdkLoopJson {
  threads: number;
  batchSize: number;
  contextLength: number;
  rows: AiSdkLoopRow[];
}
interface WakeUpJson {
  threads: number;
  rows: WakeUpRow[];
  notes: string[];
}
interface MemoryJson {
  forks: Array<{
    forks: number;
    prefixTokens: number;
    turnTokens: number;
    forkedBlocks: number;
    sharedBlocks: number;
    privateBlocks: number;
    forkedLlamaBytes: number;
    privateLlamaBytes: number;
  }>;
  waste: Array<{ tokens: number; blocks: number; wasteTokens: number; wasteLlamaBytes: number; wasteFraction: number }>;
}

/** The targets: a later agent's first turn >= 50x sooner; KV held <= 1.2x one prefix plus own tokens; the other tenant a miss. */
function prefixSharingRows(p: PrefixSharingResult): string[][] {
  const first = p.turns[0]!;
  const what =
    `${p.agents} agents of one tenant, first message ${first.promptTokens} tokens (${p.sharedPrefixTokens} shared), ` +
    `SmolLM2-135M, CPU ${p.threads} thread, ${p.batchSize} tokens a pass, ${p.maxTokens}-token reply`;
  const sooner = `${p.firstOverLater.toFixed(0)}x sooner (target 50x: ${p.firstOverLater >= 50 ? 'met' : 'not met'})`;
  const held = p.heldOverOnePrefixPlusOwn;
  return [
    [
      'prefix sharing, real model',
      `${what}: a later agent's first turn, median of ${p.agents - 1} (it evaluates ${p.laterEvaluatedTokens} tokens: ` +
        `${p.evaluatedFirstOverLater.toFixed(0)}x fewer)`,
      ms(p.laterMs),
      `the first agent's (prefill) ${ms(p.firstMs)}; a hot turn at that length ${ms(p.hotTurnMs)}`,
      sooner,
    ],
    [
      'prefix sharing, real model',
      `${what}: another tenant's first agent, the same prompt (shared ${p.otherTenantSharedTokens} tokens, ` +
        `${p.sameReply ? 'the same reply' : 'REPLY DIFFERED'})`,
      ms(p.otherTenantMs),
      `the first agent's ${ms(p.firstMs)}`,
      `${p.otherTenantOverFirst.toFixed(2)}x (a miss: ~1)`,
    ],
    [
      'prefix sharing, real model',
      `${what}: KV pages the tenant holds, each block once`,
      mib(p.heldBytes),
      `one prefix + own ${mib(p.onePrefixPlusOwnBytes)}; private copies ${mib(p.privateBytes)}`,
      `${held.toFixed(2)}x (target 1.2x: ${held <= 1.2 ? 'met' : 'not met'})`,
    ],
  ];
}

function main(): void {
  fs.mkdirSync(outDir, { recursive: true });
  const started = Date.now();
  const allocator = run('allocator', 'allocator.bench.ts', ['--seconds', '1']) as AllocatorJson;
  const transfer = run('transfer', 'transfer.bench.ts', []) as TransferJson;
  const tiers = run('tiers', 'tiers.bench.ts', ['--mib', '1024', '--rounds', '9']) as TiersJson;
  // Seven passes: this VM's disk drifts by a third from one pass to the next (medians are the figures).
  const cold = run('cold-store', 'cold-store.bench.ts', ['--total-mib', '1024', '--runs', '7']) as ColdJson;
  const library = run('resume-library', 'resume.bench.ts', ['--mode', 'library', '--tokens', tokens, '--repeats', repeats]) as ResumeJson;
  // The target is judged here, within a few ms of the library's time (one round trip varies by 10-20 ms):
  // 7 repeats at least, 15 of the resumes from host (a fraction of a second each).
  const temporalArgs = ['--repeats', String(Math.max(7, Number(repeats))), '--host-repeats', String(Math.max(15, Number(repeats)))];
  const temporal = run('resume-temporal', 'resume.bench.ts', ['--mode', 'temporal', '--tokens', tokens, ...temporalArgs]) as ResumeJson;
  const memory = run('memory', 'memory.bench.ts', []) as MemoryJson;
  // A real model (SmolLM2-135M on the CPU): 8k tokens of prefill take about two minutes here.
  const engine = run('engine-resume', 'engine-resume.bench.ts', ['--tokens', '512,2k,8k', '--repeats', repeats]) as EngineResumeJson;
  const engineRows = engine.rows;
  const engineThreads = engine.threads;
  // The same through Temporal: a resume update, then the first turn after it (the engine loads the pages).
  const agent = run('agent-resume', 'agent-resume.bench.ts', ['--tokens', '512,2k,8k', '--repeats', repeats]) as AgentResumeJson;
  // An AI SDK tool loop of 10 steps through kvfabric's provider and through one that keeps no KV; the
  // latter re-prefills the whole context every step (over two minutes at 8k), so at 8k it runs 2 steps.
  const aiSdk = run('ai-sdk-loop', 'ai-sdk-loop.bench.ts', ['--tokens', '2k,8k']) as AiSdkLoopJson;
  // The first call after a planned pause: resident, cold (no wake-up), woken; the real model and the Llama-3-8B shape.
  const wakeArgs = ['--model-tokens', '2k,8k', '--llama-tokens', '8k,32k', '--repeats', String(Math.max(5, Number(repeats)))];
  const wakeUp = run('wake-up', 'wake-up.bench.ts', wakeArgs) as WakeUpJson;
  // 16 agents of one tenant with a common 2k-token prefix, then another tenant's first agent with the same prompt.
  const prefixSharing = run('prefix-sharing', 'prefix-sharing.bench.ts', ['--agents', '16']) as PrefixSharingResult;
  // The tier in an object store: suspend/resume through SeaweedFS against raw PUT/GET, bytes per hot turn.
  const s3Tier = run('s3-tier', 's3-tier.bench.ts', ['--tokens', '8k,32k', '--repeats', '2']) as S3TierResult;

  const rows: string[][] = [];
  for (const r of allocator.results)
    rows.push(['allocator', r.scenario, `native ${rate(r.native)}`, `pure TS ${rate(r.ts)}`, `${r.ratio.toFixed(2)}x`]);
  if (transfer.skipped || !transfer.figures) {
    rows.push(['transfer (GPU)', 'device <-> host per block size', transfer.skipped ?? GPU_NOTE, '-', '-']);
  } else {
    for (const f of transfer.figures) {
      if (f.way === 'contiguous' || f.gbps === undefined) continue;
      const what = `${f.direction} ${f.blockBytes / 1024} KiB blocks, ${f.way} (${transfer.deviceName})`;
      rows.push([
        'transfer (GPU)',
        what,
        `${f.gbps.toFixed(1)} GB/s`,
        `contiguous ${f.ceilingGBps.toFixed(1)} GB/s`,
        `${f.ratio!.toFixed(2)} (target ${f.target})`,
      ]);
    }
  }
  const t = tiers.bestGBps;
  for (const [move, verified, pairedShare] of [
    ['demote', t.demote, tiers.checksumShare.demote],
    ['promote', t.promote, tiers.checksumShare.promote],
  ] as const) {
    const share = Math.max(0, pairedShare);
    rows.push([
      'host tier',
      `${move}, ${gib(tiers.bytes)} context, verified, best of ${tiers.rounds} (checksum's share ${(share * 100).toFixed(1)}%, median of paired rounds, target <= 10%)`,
      `${verified.toFixed(2)} GB/s`,
      `memcpy ${t.memcpy.toFixed(2)} GB/s`,
      `${(verified / t.memcpy).toFixed(2)} (target 0.95)`,
    ]);
  }
  const c = cold.median;
  // Ratios: the median of the passes' own (each store pass against the dd passes around it), as for resume.
  rows.push([
    'disk tier',
    `write ${gib(cold.dataBytes)}, AES-GCM as the tiers use it, median`,
    `${c.storeWrite.toFixed(2)} GB/s`,
    `dd ${c.rawWrite.toFixed(2)} GB/s (before+after)`,
    `${cold.ratio.write.toFixed(2)} (target 0.9)`,
  ]);
  rows.push([
    'disk tier',
    `read ${gib(cold.dataBytes)}, median`,
    `${c.storeRead.toFixed(2)} GB/s`,
    `dd ${c.rawRead.toFixed(2)} GB/s (before+after)`,
    `${cold.ratio.read.toFixed(2)} (target 0.9)`,
  ]);
  for (const lib of library.rows) {
    const r = temporal.rows.find((t) => t.tokens === lib.tokens && t.from === lib.from);
    const prefill = PREFILL_H200_MS[lib.tokens];
    const context = `${lib.tokens / 1024}k tokens (${gib(lib.bytes)}) from ${lib.from}`;
    rows.push([
      'resume, library',
      context,
      ms(lib.totalMs),
      prefill ? `H200 prefill ${ms(prefill)}` : '-',
      prefill ? (lib.totalMs / prefill).toFixed(2) : '-',
    ]);
    if (!r) continue;
    // The target: the library's restore x 1.15, or plus one update's round trip (30 ms), the larger;
    // against the library's restore alternated with these resumes in the same process where there was room,
    // judged pair by pair (each resume against the restore just before it; this VM's memory switches between
    // two speeds within a row, 110-120 or 170-220 ms for the library's 4 GiB, so the medians of the two
    // columns can come from different speeds), the median over the pairs deciding.
    const reference = r.libraryMs ?? lib.totalMs;
    const boundOf = (libraryMs: number) => Math.max(1.15 * libraryMs, libraryMs + 30);
    const bound = boundOf(reference);
    const overBound = r.pairs ? median(r.pairs.map((pair) => pair.totalMs - boundOf(pair.libraryMs))) : r.totalMs - bound;
    const judged = r.pairs ? `; per pair, resume - bound: median ${signedMs(overBound)}` : '';
    rows.push([
      'resume, Temporal',
      `${context}, checked against the workflow's digest (worker: restore ${ms(r.restoreMs!)} + digest ${ms(r.verifyMs!)})`,
      ms(r.totalMs),
      `library ${ms(reference)}${r.libraryMs === undefined ? '' : ' (alternated)'}, bound ${ms(bound)}${judged}`,
      `${(r.totalMs / reference).toFixed(2)}x (${overBound <= 0 ? 'within' : 'over'})`,
    ]);
  }
  for (const r of temporal.rows.filter((row) => row.from === 'resident')) {
    rows.push([
      'resume, Temporal',
      `${r.tokens / 1024}k tokens already resident: the update's round trip (restores nothing)`,
      ms(r.totalMs),
      '-',
      '-',
    ]);
  }
  for (const e of engineRows) {
    const what = `${e.tokens} tokens (${(e.kvBytes / 2 ** 20).toFixed(1)} MiB), SmolLM2-135M, CPU ${engineThreads} thread(s)${e.sameState ? '' : ', KV DIFFERED'}`;
    // The targets: within 1.5x of llama.cpp's own load at 2k and 8k; 1,000x the prefill at 8k.
    rows.push([
      'resume, real model',
      `${what}, library: pages (host) to a ready sequence (the layout alone: ${ms(e.assembleMs)})`,
      ms(e.resumeMs),
      `llama.cpp's own load of the state ${ms(e.llamaLoadMs)}`,
      `${e.loadRatio.toFixed(2)}x${e.tokens >= 2048 ? ` (${e.loadRatio <= 1.5 ? 'within' : 'over'} 1.5x)` : ''}`,
    ]);
    rows.push([
      'resume, real model',
      `${what}, library, against re-prefill`,
      ms(e.resumeMs),
      `prefill ${ms(e.prefillMs)}`,
      `${e.ratio.toFixed(0)}x faster${e.tokens >= 8000 ? ` (target 1000x: ${e.ratio >= 1000 ? 'met' : 'not met'})` : ''}`,
    ]);
    rows.push([
      'resume, real model',
      `${what}, library, from disk (restore + load)`,
      ms(e.diskResumeMs),
      `prefill ${ms(e.prefillMs)}`,
      `${e.diskRatio.toFixed(0)}x faster`,
    ]);
    rows.push([
      'turn, real model',
      `${e.tokens} tokens, the engine's hot turn (its KV saved after the reply: ${ms(e.saveMs)})${e.sameTurns ? '' : ', TOKENS DIFFERED'}`,
      ms(e.hotTurnMs),
      `node-llama-cpp's same turn ${ms(e.plainTurnMs)}`,
      `${e.turnRatio.toFixed(3)}x`,
    ]);
  }
  for (const a of agent.rows) {
    const engineRow = engineRows.find((e) => e.tokens === a.size);
    const roundTrip = agent.turns.find((t) => t.size === a.size)?.roundTripMs;
    // The target, from host: the resume update (restore, digest, engine load) within the library's pages
    // to a ready sequence plus one resident update round trip.
    const bound = a.from === 'host' && engineRow && roundTrip !== undefined ? engineRow.resumeMs + roundTrip : undefined;
    const what = `${a.tokens} tokens (${(a.kvBytes / 2 ** 20).toFixed(1)} MiB) from ${a.from}, through Temporal: the resume update (median of ${a.repeats}; engine load ${ms(a.engineLoadMs)}; the first, apart: ${ms(a.firstResumeMs)}), then the first turn ${ms(a.firstTurnMs)} apart (hot turn ${ms(a.hotTurnMs)})`;
    rows.push([
      'resume, real model',
      what,
      ms(a.resumeMs),
      bound === undefined
        ? `prefill turn ${ms(a.prefillMs)}`
        : `library ${ms(engineRow!.resumeMs)} + round trip ${ms(roundTrip!)}: bound ${ms(bound)}`,
      bound === undefined
        ? `${(a.prefillMs / a.resumeMs).toFixed(0)}x faster`
        : `${(a.resumeMs / bound).toFixed(2)} (${a.resumeMs <= bound ? 'within' : 'over'})`,
    ]);
  }
  // The target: a hot turn through Temporal within 1.05x the plain engine's same turn plus one resident
  // update round trip (a pin or unpin), all three alternated in one process and judged pair by pair.
  for (const h of agent.turns) {
    rows.push([
      'turn, real model',
      `hot one-token turn at ${h.tokens} tokens through Temporal, CPU ${agent.threads} thread(s), medians of ${h.repeats}${h.sameTokens ? '' : ', TOKEN COUNTS DIFFERED'}`,
      ms(h.hotTurnMs),
      `plain node-llama-cpp ${ms(h.plainTurnMs)} + round trip ${ms(h.roundTripMs)}: bound ${ms(h.boundMs)}; per pair, turn - bound: median ${signedMs(h.overBoundMs)}`,
      `${h.overhead.toFixed(2)}x (${h.withinTarget ? 'within' : 'over'})`,
    ]);
  }
  for (const a of aiSdk.rows) {
    const what = `${a.size}: ${a.steps} steps, ${a.firstPromptTokens} to ${a.lastPromptTokens} prompt tokens, SmolLM2-135M, CPU ${aiSdk.threads} thread(s), ${aiSdk.batchSize} tokens a pass${a.sameToolCalls ? '' : ', TOOL CALLS DIFFERED'}`;
    rows.push([
      'AI SDK tool loop, real model',
      `${what}: time to first token, mean over steps 2-${a.plainSteps} (the plain loop ran ${a.plainSteps} of ${a.steps})`,
      a.plainSteps > 1 ? ms(a.kvfabricLaterFirstTokenMs) : '-',
      a.plainSteps > 1 ? `provider keeping no KV ${ms(a.plainLaterFirstTokenMs)}` : '-',
      a.plainSteps > 1 ? `${a.laterFirstTokenRatio.toFixed(1)}x faster` : '-',
    ]);
    rows.push([
      'AI SDK tool loop, real model',
      `${what}: prompt tokens evaluated per step after the first, mean`,
      a.kvfabricEvaluatedAfterFirst.toFixed(0),
      `provider keeping no KV ${a.plainEvaluatedMean.toFixed(0)} (steps 1-${a.plainSteps})`,
      `${(a.plainEvaluatedMean / a.kvfabricEvaluatedAfterFirst).toFixed(0)}x fewer`,
    ]);
  }
  // The target: after a planned wake-up, within 1.1x the call on an agent that never left the engine, pair by pair.
  for (const w of wakeUp.rows) {
    const what = `${w.tokens} tokens (${(w.kvBytes / 2 ** 20).toFixed(1)} MiB), ${w.engine}: the first call after a planned pause of ${ms(w.leadMs + 1000)}`;
    rows.push([
      'wake-up',
      `${what}, suspended to disk, woken (on the device at the instant ${w.onDeviceAtInstant}/${w.repeats}; medians of ${w.repeats})`,
      ms(w.wokenMs),
      `never left the engine ${ms(w.residentMs)}; per pair, woken - 1.1x: median ${signedMs(w.overBoundMs)}`,
      `${(w.wokenMs / w.residentMs).toFixed(2)}x (${w.withinTarget ? 'within' : 'over'})`,
    ]);
    rows.push([
      'wake-up',
      `${what}, suspended to disk, no wake-up: resumed on the call's path`,
      ms(w.coldMs),
      `woken ${ms(w.wokenMs)}`,
      `${(w.coldMs / w.wokenMs).toFixed(2)}x`,
    ]);
  }
  rows.push(...prefixSharingRows(prefixSharing));
  rows.push(...s3TierRows(s3Tier));
  for (const f of memory.forks) {
    rows.push([
      'memory',
      `parent + ${f.forks} forks of ${f.prefixTokens} tokens, ${f.turnTokens} own each`,
      `${f.forkedBlocks} blocks (${gib(f.forkedLlamaBytes)})`,
      `private copies ${f.privateBlocks} blocks (${gib(f.privateLlamaBytes)})`,
      (f.forkedBlocks / f.privateBlocks).toFixed(2),
    ]);
  }
  for (const w of memory.waste) {
    rows.push([
      'internal waste',
      `context of ${w.tokens} tokens (${w.blocks} blocks)`,
      `${w.wasteTokens} slots (${(w.wasteLlamaBytes / 2 ** 20).toFixed(2)} MiB)`,
      '-',
      `${(w.wasteFraction * 100).toFixed(2)}%`,
    ]);
  }

  const headers = ['benchmark', 'what', 'figure', 'same-run reference', 'ratio'];
  const notes = [
    `resume contexts: ${tokens} tokens at 128 KiB per token (Llama-3-8B: 32 layers, 8 KV heads, head dim 128, bf16)`,
    'allocator, tiers and resume run on the CPU backend here: "device" memory is host memory; the transfer rows need a CUDA device (scripts/gpu-check.sh)',
    'memory: block counts from the allocator, bytes at 2 MiB Llama-3-8B blocks',
    ...cold.notes,
    ...library.notes,
    ...temporal.notes,
    ...wakeUp.notes,
  ];
  const m = machine(transfer.deviceName ?? GPU_NOTE);
  const machineLine = `${m.cpu} x${m.cores} cores, ${m.memoryGiB} GiB RAM, ${m.os}${m.hypervisor ? ` (${m.hypervisor} VM)` : ''}, Node ${m.node}, ${transfer.deviceName ?? 'no GPU'}`;
  const markdown = [
    `Machine: ${machineLine}; ${new Date().toISOString().slice(0, 10)}.`,
    '',
    `| ${headers.join(' | ')} |`,
    `| ${headers.map(() => '---').join(' | ')} |`,
    ...rows.map((row) => `| ${row.join(' | ')} |`),
    '',
    ...notes.map((n) => `- ${n}`),
  ].join('\n');
  const results = {
    date: new Date().toISOString(),
    machine: m,
    options: { tokens, repeats },
    durationSeconds: Math.round((Date.now() - started) / 1000),
    allocator,
    transfer,
    hostTier: tiers,
    diskTier: cold,
    resume: { library, temporal, prefillH200Ms: PREFILL_H200_MS },
    memory,
    engineResume: engine,
    agentResume: agent,
    aiSdkLoop: aiSdk,
    wakeUp,
    prefixSharing,
    s3Tier,
    notes,
  };
  fs.writeFileSync(path.join(outDir, 'results.json'), `${JSON.stringify(results, null, 2)}\n`);
  fs.writeFileSync(path.join(outDir, 'results.md'), `${markdown}\n`);
  writeResumeChart(results, subtitleOf(results));
  console.log(`\n=== kvfabric benchmarks: ${machineLine}\n`);
  printTable(headers, rows);
  console.log();
  for (const n of notes) console.log(`note: ${n}`);
  console.log(`\nwrote ${path.join(outDir, 'results.json')}, results.md and ${RESUME_CHART_FILE} (${results.durationSeconds} s)`);
}

main();
