// The shared tier in an object store: one SeaweedFS (a real S3 server, test/support/seaweedfs.ts) started
// here, and in the same run:
//   suspend   TieredMemory.demote(to disk) of a Llama-3-8B-shaped context (128 KiB of KV per token), and of
//             the real model's (SmolLM2-135M through the llama engine: its KV after a prefill, 22.5 KiB a
//             token), into the bucket, against raw PUTs of the same segment sizes through the same S3 store
//             (create-only, multipart in parts of the same size, the same parts in parallel), one segment
//             at a time as a spill writes them;
//   resume    TieredMemory.promote from the bucket to the device, against raw ranged GETs of the same bytes
//             in runs of the reader's size (JOB_BYTES), as many at once as the cold store's read limit,
//             each streamed into a buffer of its own (getInto) as the tier streams into its staging slots;
//   each repeat measures the tier and then the raw requests back to back, so both see the same load;
//   CPU       the CPU time this process (all its threads, and its main thread alone) and the server took
//             during each resume and raw GET, and AES-GCM opening as many bytes on this thread (the addon,
//             as the crypto threads run it; one run's bytes, hot in cache: a floor). Server and client
//             share the machine's cores and keep them busy, so a resume, which must also decrypt, reaches
//             at best about raw CPU / (raw CPU + AES-GCM): the bound printed beside its ratio;
//   hot turns bytes put per turn with a durable copy per turn (`durability: every-turn`) at 512 and 8k tokens
//             of context, the same turn, in a directory and in the bucket: in all and in manifests and their
//             logs (src/tiers/cold/manifest-log.ts); with the tiny shape (256 B of KV per token, where the
//             manifest weighs most) over --turns and again over --long-turns, enough that both sizes compact
//             their log (the context grows by that many turns meanwhile), and with Llama-3-8B's over 8.
// Targets (issue 41): resume >= 0.9x raw GET throughput, suspend >= 0.8x raw PUT, bytes per hot turn at 8k
// <= 1.25x those at 512.
//   npx tsx bench/s3-tier.bench.ts [--tokens 8k,32k] [--model-tokens 2k,8k] [--repeats 2] [--turns 24]
//     [--long-turns 240] [--parts transfers,hot-turns] [--json FILE]
// The real model's 8k context takes minutes of prefill on a 2-core CPU (progress on stderr); its 2k row is
// the first 2,048 tokens of that context's KV. --model-tokens '' leaves the real model out.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { BlobStore } from '../src/blob-store/blob-store';
import { readRangeInto } from '../src/blob-store/ranged-read-into';
import { modelFile } from '../src/engines/llama/default-model';
import { LlamaEngine } from '../src/engines/llama/llama-engine';
import { loadNodeLlamaCpp } from '../src/engines/llama/node-llama-cpp';
import { type AgentModel, MODELS } from '../src/engines/models';
import { NativeAllocator } from '../src/fabric';
import { loadNativeBinding } from '../src/fabric/native-binding';
import { bytesPerTokenOf } from '../src/fabric/layout';
import { forEachBounded, Limiter } from '../src/tiers/cold/bounded-parallel';
import { ColdStore, KeyRing } from '../src/tiers/cold';
import { blocksPerJob } from '../src/tiers/cold/segment-writer';
import { TieredMemory } from '../src/tiers/tiered-memory';
import { type ChildProcess, spawn } from 'node:child_process';

import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';

import { S3BlobStore } from '../src/blob-store/s3/s3-blob-store';
import { freePort } from '../src/dev-server/dev-server';
import { seaweedfsBinary } from '../scripts/ensure-seaweedfs';
import { CountingBlobStore } from '../test/tiers/fixtures/counting-blob-store';
import { blobWrites, directoryWrites, hotTurnBytes, type Written } from '../test/tiers/fixtures/hot-turns';
import { messageOf } from './agent-resume.bench';
import { median, modelContextSizes, option, printTable } from './measure';

const LLAMA = MODELS['llama-3-8b']!;
const SMOLLM2 = MODELS['smollm2-135m']!;
const CHUNK_TOKENS = 1024;
/** The cold store's crypto threads (its default on two cores) and its run reads in flight (cold-store.ts). */
const CRYPTO_THREADS = Math.min(2, os.availableParallelism());
const READ_JOBS = CRYPTO_THREADS * 2 + 1;

const tokenList = (option('--tokens') ?? '8k,32k').split(',').map((item) => Number.parseInt(item, 10) * (/k$/i.test(item) ? 1024 : 1));
/** The real model's sizes: 8k is 8,000 tokens, inside its trained 8,192 (measure.ts). */
const modelTokenList = (option('--model-tokens') ?? '2k,8k') === '' ? [] : modelContextSizes(option('--model-tokens') ?? '2k,8k');
const repeats = Number(option('--repeats') ?? 2);
const turns = Number(option('--turns') ?? 24);
/** A second run of the tiny shape, long enough that the log is compacted at 8k too (the context grows meanwhile). */
const longTurns = Number(option('--long-turns') ?? 240);
const jsonPath = option('--json');
/** What to measure: transfers (suspend, resume, raw), hot-turns (bytes per turn); both by default. */
const parts = (option('--parts') ?? 'transfers,hot-turns').split(',');

export interface S3TransferRow {
  /** "Llama-3-8B shape" (random KV) or "SmolLM2-135M" (the real model's KV after a prefill). */
  model: string;
  tokens: number;
  bytes: number;
  segments: number;
  repeats: number;
  /** Medians, ms. */
  suspendMs: number;
  rawPutMs: number;
  resumeMs: number;
  rawGetMs: number;
  /** Each repeat's time, ms, in order: suspend and resume, then the raw PUTs and GETs. */
  runs: { suspend: number[]; rawPut: number[]; resume: number[]; rawGet: number[] };
  /** CPU ms (client: this process; server: SeaweedFS) during each resume and raw GET, and AES-GCM's, medians. */
  cpu: TransferCpu;
}

/** Medians of CPU time, ms, per repeat; NaN where /proc could not tell (not Linux). */
export interface TransferCpu {
  resume: CpuSpent;
  rawGet: CpuSpent;
  /** The addon's AES-GCM opening the context's bytes in the reader's runs, on one thread. */
  gcmOpenMs: number;
  /** Cores both kept busy during the resume: (client + server) / wall. */
  resumeCores: number;
}

export interface CpuSpent {
  /** This process, every thread. */
  clientMs: number;
  /** Its main thread alone (the event loop: the S3 client, and copying blocks into their frames). */
  mainThreadMs: number;
  serverMs: number;
}

/** A context to suspend and resume: `tokens` tokens of `model`'s shape, whose KV `kv` gives in pieces. */
interface TransferSubject {
  label: string;
  model: AgentModel;
  tokens: number;
  /** The KV of tokens [from, to), token-major rows of the model's shape. */
  kv(from: number, to: number): Uint8Array;
}

export interface HotTurnBytesRow {
  backend: 'directory' | 's3';
  model: string;
  contextTokens: number;
  turnTokens: number;
  turns: number;
  bytesPerTurn: number;
  metadataPerTurn: number;
}

export interface S3TierResult {
  server: string;
  partBytes: number;
  parallelParts: number;
  transfers: S3TransferRow[];
  hotTurns: HotTurnBytesRow[];
}

export interface SeaweedfsServer {
  store(options?: { prefix?: string }): S3BlobStore;
  /** CPU time the server process has used so far, ms (user + system); NaN where /proc cannot tell. */
  cpuMs(): number;
  close(): Promise<void>;
}

/**
 * `weed server` as test/support/seaweedfs.ts starts it, but with room for gigabytes: the tests' server
 * keeps to 8 volumes of 64 MB, fewer bytes than one 8k-token context of Llama-3-8B.
 */
export async function startSeaweedfs(): Promise<SeaweedfsServer> {
  const binary = seaweedfsBinary();
  if (!fs.existsSync(binary)) throw new Error(`SeaweedFS is not built (${binary}): run npm run setup:tests`);
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-s3-bench-weed-'));
  fs.mkdirSync(path.join(root, 'data'));
  const credentials = { accessKeyId: `kvf${randomBytes(8).toString('hex')}`, secretAccessKey: randomBytes(24).toString('hex') };
  const identity = { name: 'bench', credentials: [{ accessKey: credentials.accessKeyId, secretKey: credentials.secretAccessKey }] };
  const config = path.join(root, 's3.json');
  fs.writeFileSync(config, JSON.stringify({ identities: [{ ...identity, actions: ['Admin', 'Read', 'Write', 'List'] }] }), { mode: 0o600 });
  // Every port chosen here (gRPC's default, HTTP + 10000, could be taken or past 65535).
  const flags = ['master', 'volume', 'filer', 's3'].flatMap((part) => [`${part}.port`, `${part}.port.grpc`]);
  const ports = new Map<string, number>();
  for (const flag of flags) ports.set(flag, await freePort());
  const args = [
    'server',
    `-dir=${path.join(root, 'data')}`,
    '-ip=127.0.0.1',
    '-ip.bind=127.0.0.1',
    '-filer',
    '-s3',
    `-s3.config=${config}`,
  ];
  args.push(...flags.map((flag) => `-${flag}=${ports.get(flag)}`), '-s3.port.iceberg=0', '-s3.port.lance=0', '-master.telemetry=false');
  // Volumes of 1 GB, as many as the disk holds.
  args.push('-master.volumeSizeLimitMB=1024', '-volume.max=0', '-volume.preStopSeconds=0');
  const out = fs.openSync(path.join(root, 'weed.log'), 'a');
  const child: ChildProcess = spawn(binary, args, { cwd: root, stdio: ['ignore', out, out] });
  fs.closeSync(out);
  const endpoint = `http://127.0.0.1:${ports.get('s3.port')}`;
  const bucket = `bench-${randomBytes(4).toString('hex')}`;
  const admin = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials, maxAttempts: 1 });
  const close = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(killer);
    }
    fs.rmSync(root, { recursive: true, force: true });
  };
  try {
    for (const deadline = Date.now() + 60_000; ; ) {
      if (child.exitCode !== null) throw new Error(`weed server exited (${child.exitCode}): see ${root}/weed.log`);
      try {
        await admin.send(new CreateBucketCommand({ Bucket: bucket }));
        break;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`weed server did not serve S3 within 60 s: ${(err as Error).name}`);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  } catch (err) {
    await close();
    throw err;
  } finally {
    admin.destroy();
  }
  const store = (options: { prefix?: string } = {}) =>
    new S3BlobStore({ bucket, endpoint, region: 'us-east-1', forcePathStyle: true, credentials, ...options });
  return { store, cpuMs: () => processCpuMs(child.pid), close };
}

/** utime + stime of a process or thread from its stat file (fields 14 and 15, after the command's parenthesis), ms. */
function statCpuMs(file: string): number {
  try {
    const stat = fs.readFileSync(file, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return Number.NaN;
  }
}
const processCpuMs = (pid: number | undefined) => statCpuMs(`/proc/${pid}/stat`);
const mainThreadCpuMs = () => statCpuMs(`/proc/self/task/${process.pid}/stat`);
/** USER_HZ: 100 on every Linux ABI Node runs on. */
const CLOCK_TICKS_PER_SECOND = 100;

/** Runs `work` and returns its wall time and the CPU this process and the server used meanwhile, ms. */
async function measured(server: SeaweedfsServer, work: () => Promise<unknown>): Promise<{ wallMs: number } & CpuSpent> {
  const client = process.cpuUsage();
  const mainBefore = mainThreadCpuMs();
  const serverBefore = server.cpuMs();
  const started = performance.now();
  await work();
  const wallMs = performance.now() - started;
  const { user, system } = process.cpuUsage(client);
  return {
    wallMs,
    clientMs: (user + system) / 1000,
    mainThreadMs: mainThreadCpuMs() - mainBefore,
    serverMs: server.cpuMs() - serverBefore,
  };
}

/**
 * AES-256-GCM opening `bytes` in the reader's runs, through the addon on this thread as a crypto thread
 * runs it, ms: what decryption alone costs a resume at least (one run, hot in cache, on a thread no other
 * work shares). NaN where the addon lacks it.
 */
function gcmOpenMs(bytes: number, blockBytes: number): number {
  const { gcmAvailable, gcmSeal, gcmOpen } = loadNativeBinding();
  if (!gcmAvailable || !gcmSeal || !gcmOpen) return Number.NaN;
  const key = randomBytes(32);
  const perRun = blocksPerJob(blockBytes);
  const run = new Uint8Array(perRun * blockBytes).fill(1);
  const sealItems = Array.from({ length: perRun }, (_, i) => ({
    offset: i * blockBytes,
    length: blockBytes,
    iv: randomBytes(12),
    aad: randomBytes(64),
  }));
  const runs = Math.ceil(bytes / run.byteLength);
  // One run sealed and opened again and again (in place: each open restores the ciphertext's plaintext,
  // so each run is sealed first, outside the timing).
  let spent = 0;
  for (let r = 0; r < runs; r++) {
    const tags = gcmSeal(key, run, sealItems);
    const openItems = sealItems.map((item, i) => ({ ...item, tag: tags.subarray(i * 16, (i + 1) * 16) }));
    const started = performance.now();
    if (gcmOpen(key, run, openItems) >= 0) throw new Error('AES-GCM refused what it sealed');
    spent += performance.now() - started;
  }
  return spent;
}

const ringOf = () => new KeyRing([{ id: 'bench', key: randomBytes(32) }], 'bench');
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;
const gbps = (bytes: number, ms: number) => `${(bytes / ms / 1e6).toFixed(2)} GB/s`;
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

/** Suspend and resume of a subject's context through the bucket, then raw PUTs and GETs of the same segments. */
async function transfer(server: SeaweedfsServer, subject: TransferSubject): Promise<S3TransferRow> {
  const { label, model, tokens } = subject;
  const name = `${model.name}-${tokens}`;
  const store = server.store({ prefix: `transfer-${name}/` });
  const raw = server.store({ prefix: `raw-${name}/` });
  const blockBytes = bytesPerTokenOf(model.shape) * model.tokensPerBlock;
  const blocks = Math.ceil(tokens / model.tokensPerBlock);
  const pool = new NativeAllocator({
    shape: model.shape,
    tokensPerBlock: model.tokensPerBlock,
    blockCount: blocks,
    hostBlockCount: blocks,
  });
  const cold = await ColdStore.open({ store, keyRing: ringOf(), cryptoThreads: CRYPTO_THREADS });
  const memory = new TieredMemory({ pool, cold });
  const times = { suspend: [] as number[], rawPut: [] as number[], resume: [] as number[], rawGet: [] as number[] };
  const cpu = { resume: [] as CpuSpent[], rawGet: [] as CpuSpent[], gcmOpenMs: [] as number[], resumeCores: [] as number[] };
  let sizes: number[] = [];
  const fill = async () => {
    memory.create('agent', 1);
    for (let done = 0; done < tokens; done += CHUNK_TOKENS)
      await memory.append('agent', subject.kv(done, Math.min(tokens, done + CHUNK_TOKENS)));
  };
  try {
    await fill();
    let body: Buffer | undefined;
    // Each repeat measures kvfabric and then the raw requests back to back, so both see the same load on a
    // noisy machine (the server shares its cores with this process).
    for (let repeat = 0; repeat < repeats; repeat++) {
      let started = performance.now();
      await memory.demote('agent', 'disk');
      times.suspend.push(performance.now() - started);
      sizes = (await store.list('cold/segments/')).map((head) => head.size);
      const resumed = await measured(server, () => memory.promote('agent'));
      times.resume.push(resumed.wallMs);
      cpu.resume.push(resumed);
      cpu.resumeCores.push((resumed.clientMs + resumed.serverMs) / resumed.wallMs);
      // The next suspend puts every page again: a fresh context, its disk copies gone with the old one.
      await memory.release('agent');
      body ??= randomBytes(Math.max(...sizes));
      const keys = sizes.map((_, i) => `raw/${repeat}/${i}.seg`);
      started = performance.now();
      for (const [i, size] of sizes.entries()) await raw.put(keys[i]!, body.subarray(0, size), { ifNoneMatch: '*' });
      times.rawPut.push(performance.now() - started);
      const got = await measured(server, () => rawRangedGets(raw, keys, sizes, blockBytes));
      times.rawGet.push(got.wallMs);
      cpu.rawGet.push(got);
      for (const key of keys) await raw.delete(key);
      cpu.gcmOpenMs.push(gcmOpenMs(tokens * bytesPerTokenOf(model.shape), blockBytes));
      console.log(
        `  ${label}, ${tokens} tokens, repeat ${repeat + 1}/${repeats} (${sizes.length} segments): ` +
          `suspend ${times.suspend.at(-1)!.toFixed(0)} ms, raw PUT ${times.rawPut.at(-1)!.toFixed(0)} ms ` +
          `(${(times.rawPut.at(-1)! / times.suspend.at(-1)!).toFixed(2)}x); ` +
          `resume ${times.resume.at(-1)!.toFixed(0)} ms, raw GET ${times.rawGet.at(-1)!.toFixed(0)} ms ` +
          `(${(times.rawGet.at(-1)! / times.resume.at(-1)!).toFixed(2)}x); CPU of resume ${cpuText(cpu.resume.at(-1)!)}, ` +
          `raw GET ${cpuText(cpu.rawGet.at(-1)!)}, AES-GCM alone ${cpu.gcmOpenMs.at(-1)!.toFixed(0)} ms`,
      );
      if (repeat + 1 < repeats) await fill();
    }
  } finally {
    if (memory.has('agent')) await memory.release('agent').catch(() => undefined);
    await cold.close();
    pool.close();
    await store.close();
    await raw.close();
  }
  return {
    model: label,
    tokens,
    bytes: tokens * bytesPerTokenOf(model.shape),
    segments: sizes.length,
    repeats,
    suspendMs: median(times.suspend),
    rawPutMs: median(times.rawPut),
    resumeMs: median(times.resume),
    rawGetMs: median(times.rawGet),
    runs: times,
    cpu: {
      resume: medianCpu(cpu.resume),
      rawGet: medianCpu(cpu.rawGet),
      gcmOpenMs: median(cpu.gcmOpenMs),
      resumeCores: median(cpu.resumeCores),
    },
  };
}

const medianCpu = (spent: CpuSpent[]): CpuSpent => ({
  clientMs: median(spent.map((s) => s.clientMs)),
  mainThreadMs: median(spent.map((s) => s.mainThreadMs)),
  serverMs: median(spent.map((s) => s.serverMs)),
});
const cpuText = (spent: CpuSpent) =>
  `${spent.clientMs.toFixed(0)} ms here (${spent.mainThreadMs.toFixed(0)} on the main thread) + ${spent.serverMs.toFixed(0)} ms in the server`;

/**
 * The best ratio a resume can reach when client and server keep every core busy: the raw GET's CPU
 * against that plus the decryption no resume can skip.
 */
export function decryptionBound(cpu: TransferCpu): number {
  const raw = cpu.rawGet.clientMs + cpu.rawGet.serverMs;
  return raw / (raw + cpu.gcmOpenMs);
}

/** A Llama-3-8B-shaped context of random KV. */
function llamaSubject(tokens: number): TransferSubject {
  const chunk = randomBytes(CHUNK_TOKENS * bytesPerTokenOf(LLAMA.shape));
  const perToken = bytesPerTokenOf(LLAMA.shape);
  return { label: 'Llama-3-8B shape', model: LLAMA, tokens, kv: (from, to) => chunk.subarray(0, (to - from) * perToken) };
}

/**
 * The real model's KV: SmolLM2-135M through the llama engine, one turn whose message fills `tokens`
 * tokens of context (prefill), its KV then saved as a worker saves a turn's. Progress goes to stderr.
 */
async function realModelKv(tokens: number): Promise<{ tokens: number; kv: Uint8Array }> {
  const engine = await LlamaEngine.open({ contextLength: tokens + 192, hotContexts: 1 });
  const nlc = await loadNodeLlamaCpp();
  const llama = await nlc.getLlama({ gpu: false, build: 'never', logLevel: nlc.LlamaLogLevel.error, progressLogs: false });
  const tokenizer = await llama.loadModel({ modelPath: modelFile(), vocabOnly: true });
  const started = performance.now();
  const ticker = setInterval(
    () => process.stderr.write(`\r  prefill of ${tokens} tokens of SmolLM2-135M: ${((performance.now() - started) / 1000).toFixed(0)} s`),
    5_000,
  );
  try {
    // The chat template adds a few tokens around the message; the context ends a little past `tokens`.
    const message = messageOf(tokenizer, tokens - 16);
    const empty = { tokens: new Uint32Array(0), writeKv: async () => 0 };
    await engine.turn({ key: 'bench', context: empty, input: message, generation: { maxTokens: 1 } });
    const saved = await engine.save('bench', 0);
    process.stderr.write(
      `\r  prefill of ${saved.tokens.length} tokens of SmolLM2-135M: ${((performance.now() - started) / 1000).toFixed(0)} s\n`,
    );
    if (saved.kv.byteLength !== saved.tokens.length * bytesPerTokenOf(SMOLLM2.shape))
      throw new Error('the engine saved KV of another shape');
    return { tokens: saved.tokens.length, kv: saved.kv };
  } finally {
    clearInterval(ticker);
    await tokenizer.dispose();
    await engine.close();
  }
}

/**
 * Ranged GETs of each object in runs of the reader's size, READ_JOBS at once: a restore's reads, without
 * the crypto. Each lands in memory of its own (one buffer per GET in flight, reused) the way the cold tier
 * reads runs into its staging slots: through the store's getInto where it has one (S3), so the baseline
 * pays no more copies than the tier does.
 */
async function rawRangedGets(store: BlobStore, keys: string[], sizes: number[], blockBytes: number): Promise<void> {
  const run = blocksPerJob(blockBytes) * blockBytes;
  const ranges = keys.flatMap((key, i) =>
    Array.from({ length: Math.ceil(sizes[i]! / run) }, (_, r) => ({ key, offset: r * run, length: Math.min(run, sizes[i]! - r * run) })),
  );
  const buffers = Array.from({ length: READ_JOBS }, () => new Uint8Array(run));
  await forEachBounded(ranges, new Limiter(READ_JOBS), async ({ key, offset, length }) => {
    const buffer = buffers.pop()!;
    try {
      if ((await readRangeInto(store, key, offset, buffer.subarray(0, length))) === undefined)
        throw new Error(`raw GET of ${key} at ${offset}: no such blob`);
    } finally {
      buffers.push(buffer);
    }
  });
}

/** Bytes per hot turn at 512 and 8k tokens in a directory and in the bucket. */
async function hotTurnRows(server: SeaweedfsServer): Promise<HotTurnBytesRow[]> {
  const rows: HotTurnBytesRow[] = [];
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-s3-bench-'));
  const runs: Array<{ model: 'tiny' | 'llama-3-8b'; turns: number }> = [
    { model: 'tiny', turns },
    { model: 'tiny', turns: longTurns },
    { model: 'llama-3-8b', turns: 8 },
  ];
  try {
    for (const { model, turns: count } of runs) {
      for (const backend of ['directory', 's3'] as const) {
        for (const contextTokens of [512, 8192]) {
          const label = `${backend}-${model}-${contextTokens}`;
          let written: () => Promise<Written>;
          let cold: ColdStore;
          let counting: CountingBlobStore | undefined;
          if (backend === 'directory') {
            const dir = path.join(scratch, label);
            cold = await ColdStore.open({ directory: dir, keyRing: ringOf(), cryptoThreads: CRYPTO_THREADS });
            written = directoryWrites(dir);
          } else {
            counting = new CountingBlobStore(server.store({ prefix: `${label}/` }));
            cold = await ColdStore.open({ store: counting, keyRing: ringOf(), cryptoThreads: CRYPTO_THREADS });
            written = blobWrites(counting);
          }
          const started = performance.now();
          const turnTokens = 32;
          const perTurn = await hotTurnBytes({ cold, written, shape: MODELS[model]!.shape, contextTokens, turns: count, turnTokens });
          await cold.close();
          await counting?.close();
          console.log(
            `  hot turns, ${label}: ${perTurn.total.toFixed(0)} B per turn (${perTurn.metadata.toFixed(0)} B manifests), ` +
              `${count} turns in ${((performance.now() - started) / 1000).toFixed(1)} s`,
          );
          rows.push({
            backend,
            model,
            contextTokens,
            turnTokens,
            turns: count,
            bytesPerTurn: perTurn.total,
            metadataPerTurn: perTurn.metadata,
          });
        }
      }
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  return rows;
}

async function main(): Promise<void> {
  console.log('starting SeaweedFS ...');
  const server = await startSeaweedfs();
  // The S3 store's defaults (s3-blob-store.ts), which every store here uses.
  const partBytes = 8 * 2 ** 20;
  const parallelParts = 4;
  try {
    // Warm-up: the server grows its first volumes on the first writes.
    const warm = server.store({ prefix: 'warm-up/' });
    const warmBytes = randomBytes(256 * 2 ** 20);
    for (let i = 0; i < 2; i++) {
      await warm.put(`w/${i}`, warmBytes);
      await warm.get(`w/${i}`);
      await warm.delete(`w/${i}`);
    }
    await warm.close();
    const transfers: S3TransferRow[] = [];
    const modelSizes = parts.includes('transfers') ? modelTokenList : [];
    if (modelSizes.length > 0) {
      console.log(`the real model's KV: a prefill of ${Math.max(...modelSizes)} tokens ...`);
      const prefilled = await realModelKv(Math.max(...modelSizes));
      const perToken = bytesPerTokenOf(SMOLLM2.shape);
      for (const size of modelSizes) {
        const tokens = size === Math.max(...modelSizes) ? prefilled.tokens : size;
        console.log(`suspend and resume through S3, SmolLM2-135M, ${tokens} tokens (${mib(tokens * perToken)}) ...`);
        const kv = (from: number, to: number) => prefilled.kv.subarray(from * perToken, to * perToken);
        transfers.push(await transfer(server, { label: 'SmolLM2-135M', model: SMOLLM2, tokens, kv }));
      }
    }
    for (const tokens of parts.includes('transfers') ? tokenList : []) {
      console.log(`suspend and resume through S3, Llama-3-8B shape, ${tokens} tokens (${mib(tokens * bytesPerTokenOf(LLAMA.shape))}) ...`);
      transfers.push(await transfer(server, llamaSubject(tokens)));
    }
    console.log(`bytes per hot turn (${turns} and ${longTurns} turns of the tiny shape, 8 of Llama-3-8B's) ...`);
    const hotTurns = parts.includes('hot-turns') ? await hotTurnRows(server) : [];
    const result: S3TierResult = { server: 'SeaweedFS (weed server, local)', partBytes, parallelParts, transfers, hotTurns };
    printTable(
      [
        'model',
        'tokens',
        'bytes',
        'suspend',
        'raw PUT',
        'ratio',
        'resume',
        'raw GET',
        'ratio',
        'resume CPU',
        'raw GET CPU',
        'AES-GCM',
        'bound',
      ],
      transfers.map((t) => [
        t.model,
        String(t.tokens),
        mib(t.bytes),
        gbps(t.bytes, t.suspendMs),
        gbps(t.bytes, t.rawPutMs),
        (t.rawPutMs / t.suspendMs).toFixed(2),
        gbps(t.bytes, t.resumeMs),
        gbps(t.bytes, t.rawGetMs),
        (t.rawGetMs / t.resumeMs).toFixed(2),
        `${seconds(t.cpu.resume.clientMs + t.cpu.resume.serverMs)} (${t.cpu.resumeCores.toFixed(2)} cores)`,
        seconds(t.cpu.rawGet.clientMs + t.cpu.rawGet.serverMs),
        seconds(t.cpu.gcmOpenMs),
        decryptionBound(t.cpu).toFixed(2),
      ]),
    );
    printTable(
      ['backend', 'model', 'context', 'turns', 'bytes/turn', 'manifests/turn'],
      hotTurns.map((h) => [
        h.backend,
        h.model,
        String(h.contextTokens),
        String(h.turns),
        h.bytesPerTurn.toFixed(0),
        h.metadataPerTurn.toFixed(0),
      ]),
    );
    if (jsonPath) fs.writeFileSync(jsonPath, JSON.stringify(result, null, 2));
  } finally {
    await server.close();
  }
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}

/** bench:all's rows (bench/run-all.ts): each ratio with its target. */
export function s3TierRows(r: S3TierResult): string[][] {
  const rows: string[][] = [];
  const parts = `${r.partBytes / 2 ** 20} MiB parts, ${r.parallelParts} at once`;
  for (const t of r.transfers) {
    const what = `${t.tokens} tokens of ${t.model} (${mib(t.bytes)}, ${t.segments} segments), SeaweedFS, median of ${t.repeats}`;
    const put = t.rawPutMs / t.suspendMs;
    const get = t.rawGetMs / t.resumeMs;
    rows.push([
      'S3 tier',
      `suspend to S3, ${what}`,
      gbps(t.bytes, t.suspendMs),
      `raw PUT ${gbps(t.bytes, t.rawPutMs)} (${parts})`,
      `${put.toFixed(2)}x (target 0.8x: ${put >= 0.8 ? 'met' : 'not met'})`,
    ]);
    rows.push([
      'S3 tier',
      `resume from S3, ${what}`,
      gbps(t.bytes, t.resumeMs),
      `raw ranged GET ${gbps(t.bytes, t.rawGetMs)}; CPU (client + server) ${seconds(t.cpu.resume.clientMs + t.cpu.resume.serverMs)} ` +
        `vs ${seconds(t.cpu.rawGet.clientMs + t.cpu.rawGet.serverMs)}, AES-GCM alone ${seconds(t.cpu.gcmOpenMs)}`,
      `${get.toFixed(2)}x (target 0.9x: ${get >= 0.9 ? 'met' : 'not met'}; decryption's bound ${decryptionBound(t.cpu).toFixed(2)}x)`,
    ]);
  }
  const keyOf = (h: HotTurnBytesRow) => `${h.backend} ${h.model} ${h.turns}`;
  for (const key of [...new Set(r.hotTurns.map(keyOf))]) {
    const small = r.hotTurns.find((h) => keyOf(h) === key && h.contextTokens === 512);
    const large = r.hotTurns.find((h) => keyOf(h) === key && h.contextTokens === 8192);
    if (small === undefined || large === undefined) continue;
    const ratio = large.bytesPerTurn / small.bytesPerTurn;
    rows.push([
      'S3 tier',
      `bytes per hot turn (every-turn durability), ${large.backend === 's3' ? 'S3' : 'directory'}, ${large.model}, ` +
        `${large.turnTokens}-token turns x ${large.turns}: 8k vs 512 tokens ` +
        `(manifests ${large.metadataPerTurn.toFixed(0)} vs ${small.metadataPerTurn.toFixed(0)} B)`,
      `${large.bytesPerTurn.toFixed(0)} B`,
      `${small.bytesPerTurn.toFixed(0)} B`,
      `${ratio.toFixed(2)}x (target 1.25x: ${ratio <= 1.25 ? 'met' : 'not met'})`,
    ]);
  }
  return rows;
}
