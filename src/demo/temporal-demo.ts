// The main job (npm run demo): the Temporal dev server (SQLite file, Web UI), a GPU worker process running
// a real model (SmolLM2-135M-Instruct through llama.cpp, on the CPU) whose KV cache lives in kvfabric,
// and a scripted scenario -- two tenants, agents that converse, a fork sharing its parent's pages, an
// agent idling from the device to host memory to disk, a resume refused to the wrong capability, and the
// real resume continuing the conversation. The summary prints the replies before and after the pause and
// the resume time against re-prefilling the same conversation with the same model. `--keep` leaves the
// server and its UI up until Ctrl-C.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { AgentClient, type AgentHandle } from '../client/agent-client';
import { CapabilityIssuer } from '../security/capability-issuer';
import { startCodecServer } from '../security/codec-server';
import { ed25519PublicOf, type RawKey } from '../security/key-list';
import { CodecKeyRing, EncryptionCodec } from '../security/payload-codec';
import { ensureTemporalCli } from '../dev-server/temporal-cli';
import { freePort, startDevServer, type DevServer } from '../dev-server/dev-server';
import { FabricError } from '../fabric/errors';
import { bytesPerTokenOf } from '../fabric/layout';
import type { AgentStatus, GenerationSettings } from '../workflows/definitions';
import { MODELS } from '../engines/models';

const ROOT = resolve(__dirname, '..', '..');
const DEMO_DIR = process.env.KVFABRIC_DEMO_DIR ?? join(ROOT, '.kvfabric', 'demo');
const MODEL = MODELS['smollm2-135m']!;
const BYTES_PER_TOKEN = bytesPerTokenOf(MODEL.shape);
const KiB = 1024;
const TASK_QUEUE = 'kvfabric-demo';
const DEMO_TIMERS = { idleToWarmMs: 2500, warmToColdMs: 2500 };
const HOURS = { idleToWarmMs: 3_600_000, warmToColdMs: 3_600_000 };
/** Greedy and short: the same conversation always gets the same replies. */
const GENERATION: GenerationSettings = { maxTokens: 40 };
/** A model turn takes seconds on a laptop's CPU: room for that in every call. */
const TIMEOUTS = { attemptMs: 300_000, operationMs: 600_000 };

/** The planner's long first message: the context a resume must not recompute. */
const PROJECT_NOTES = [
  'Project notes for the Riverside footbridge.',
  'The project lead is Ada Okafor. The budget is 4.2 million euros. The deadline is 30 June 2027.',
  'The bridge spans 84 metres over the river Lea and carries pedestrians and bicycles.',
  'Steel arrives from Rotterdam in March; the deck is cast in place in April and May.',
  'Risks: river floods in February, a crane shortage in spring, and noise limits near the school.',
  'The council asked for a weekly report every Friday and a public open day before the opening.',
].join(' ');
async function main(): Promise<void> {
  const keep = process.argv.includes('--keep');
  console.log(
    `kvfabric demo: real agents (${MODEL.name} through llama.cpp) as Temporal workflows over tiered KV memory ` +
      '(CPU backend: host memory stands in for the GPU)\n',
  );

  // ---- set-up ----
  const cli = ensureTemporalCli();
  rmSync(DEMO_DIR, { recursive: true, force: true }); // a fresh history each run; kept afterwards for `npm run demo:ui`
  mkdirSync(DEMO_DIR, { recursive: true });
  const dbFile = join(DEMO_DIR, 'temporal.db');
  // Keys for this run only, handed to the worker in its environment: the control plane (this process)
  // signs capabilities, the worker gets the public key; both seal payloads with the codec key.
  const signing: RawKey[] = [{ id: 'demo-sign', key: randomBytes(32) }];
  const codecKeys: RawKey[] = [{ id: 'demo-codec', key: randomBytes(32) }];
  const codec = new CodecKeyRing(codecKeys);
  const uiPort = await preferredPort(8233);
  const codecToken = randomBytes(24).toString('base64url');
  const codecServer = await startCodecServer({
    codec: new EncryptionCodec(codec),
    token: codecToken,
    uiOrigin: `http://localhost:${uiPort}`,
    port: await preferredPort(8234),
  });
  // The dev server's UI has no identity provider, so no access token to pass: the token is the endpoint's path.
  const codecEndpoint = `${codecServer.url}/${codecToken}`;
  const server = await startDevServer({
    cli,
    dbFile,
    port: await preferredPort(7233),
    ui: { port: uiPort, codecEndpoint },
    logFile: join(DEMO_DIR, 'temporal-server.log'),
  });
  let worker: WorkerProcess | undefined;
  try {
    console.log(`temporal dev server  ${server.address} (SQLite ${relative(dbFile)}), Web UI ${server.uiUrl}`);
    console.log(`codec server         ${codecServer.url} (AES-256-GCM payloads; the UI decodes through it, anyone else sees ciphertext)`);
    worker = await startWorker(server, { trusted: signing.map(({ id, key }) => ({ id, key: ed25519PublicOf(key) })), codecKeys });
    console.log(
      `GPU worker           pid ${worker.child.pid}: ${MODEL.name} (llama.cpp), ` +
        `${(BYTES_PER_TOKEN / 1024).toFixed(1)} KiB of KV per token; ` +
        `256 device blocks (${((256 * 16 * BYTES_PER_TOKEN) / 2 ** 20).toFixed(0)} MiB), 512 host blocks, ` +
        `cold tier ${relative(join(DEMO_DIR, 'tiers'))}; metrics http://${worker.metrics}/metrics\n`,
    );
    const agents = await AgentClient.connect(
      { address: server.address, namespace: 'default' },
      { codec, issuer: new CapabilityIssuer(signing) },
      TASK_QUEUE,
    );
    try {
      const figures = await scenario(agents);
      await summary(agents, figures, worker.metrics);
    } finally {
      await agents.close();
    }
  } finally {
    if (worker) {
      worker.child.kill('SIGTERM'); // graceful: running calls finish, held contexts drain to the cold tier
      const code = await worker.exited;
      const drained = /drained.*?contexts: (\d+)/s.exec(worker.log())?.[1];
      console.log(`\nworker stopped (exit ${code})${drained !== undefined ? `, drained ${drained} held contexts to the cold tier` : ''}`);
    }
    if (keep) {
      console.log(`Web UI stays up at ${server.uiUrl} -- Ctrl-C to stop. It decodes payloads through the codec server;`);
      console.log(
        `the CLI does too: temporal workflow show -w kvagent-acme-planner --codec-endpoint ${codecServer.url} ` +
          '--codec-auth "Bearer <token>"',
      );
      await new Promise<void>((done) => process.once('SIGINT', () => done()));
    }
    await server.stop();
    await codecServer.close();
    console.log(
      `dev server stopped; the history stays in ${relative(dbFile)}: \`npm run demo:ui\` serves it at http://localhost:8233 again`,
    );
  }
}

interface Figures {
  before: string[];
  after: string;
  resumeMs: number;
  movedBytes: number;
  moveMs: number;
  verifyMs: number;
  engineLoadMs: number;
  from: string;
  contextTokens: number;
  prefillMs: number;
  prefillTokens: number;
  denials: string[];
}

async function scenario(agents: AgentClient): Promise<Figures> {
  step(`two tenants, three agents talking to ${MODEL.name}; every turn's KV is appended to kvfabric's pages`);
  const planner = await start(agents, 'acme-planner', 'acme', DEMO_TIMERS);
  const critic = await start(agents, 'acme-critic', 'acme', HOURS);
  const assistant = await start(agents, 'globex-assistant', 'globex', HOURS);
  const before = [
    await say(planner, `${PROJECT_NOTES} Summarise the project in one sentence.`),
    await say(planner, 'Who leads the project?'),
  ];
  await say(critic, 'Name one risk of building a footbridge over a river.');
  await say(assistant, 'Write a one-line greeting for the Globex team.');

  step("fork: the researcher shares the planner's pages (copy-on-write) and goes its own way");
  const { child: researcher, status: forked } = await planner.fork('acme-researcher');
  handles.set(researcher.agentId, researcher);
  transcripts.set(researcher.agentId, [...transcripts.get(planner.agentId)!]);
  show(forked);
  await say(researcher, 'What is the budget?');
  before.push(await say(planner, 'When is the deadline?'));

  step('the planner idles: device -> host (warm) after 2.5 s, host -> disk (cold) after 2.5 s more');
  let phase = '';
  for (;;) {
    const s = await planner.status();
    if (s.phase !== phase) show(s);
    phase = s.phase;
    if (phase === 'cold') break;
    await sleep(200);
  }

  step('a resume by the wrong agent is refused by the worker holding the context');
  const denials: string[] = [];
  for (const [who, intruder] of [
    ['acme-researcher (same tenant)', researcher],
    ['globex-assistant (other tenant)', assistant],
  ] as const) {
    try {
      await agents.agent('acme-planner', intruder.capability).resume();
      denials.push(`${who}: NOT DENIED`);
    } catch (err) {
      if (!(err instanceof FabricError)) throw err;
      denials.push(`${who}: ${err.code}`);
      console.log(`  resume of acme-planner with the capability of ${who}: ${err.code}`);
    }
  }
  show(await planner.status());

  step('the planner resumes: its pages come back from disk, verified, and the conversation goes on');
  const started = performance.now();
  const resumed = await planner.resume();
  const resumeMs = performance.now() - started;
  show(resumed);
  const figures = resumed.lastResume!;
  console.log(
    `  resume update -> context back, verified: ${resumeMs.toFixed(0)} ms end to end ` +
      `(${(figures.bytes / KiB).toFixed(0)} KiB from ${figures.from}: moved in ${figures.transferMs.toFixed(0)} ms, ` +
      `verified in ${figures.verifyMs.toFixed(0)} ms, into the model in ${figures.engineLoadMs.toFixed(0)} ms)`,
  );
  const after = await say(planner, 'Remind me: what are the risks?');

  step('the same conversation prefilled from scratch by a fresh agent (what a resume saves)');
  const recompute = await start(agents, 'acme-planner-recomputed', 'acme', HOURS);
  const prefillStarted = performance.now();
  const recomputed = await recompute.turn({ message: conversationText('acme-planner'), generation: { maxTokens: 1 } });
  const prefillMs = performance.now() - prefillStarted;
  console.log(`  one turn over the whole conversation (${recomputed.reply!.promptTokens} tokens): ${prefillMs.toFixed(0)} ms`);

  step('agents by search attribute (what the UI filters on): KvTenant = "acme"');
  const listed = await waitForListing(agents, 'acme', 3);
  for (const a of listed)
    console.log(
      `  ${a.agentId.padEnd(24)} ${String(a.phase).padEnd(8)} ${String(a.tier).padEnd(7)} ${String(a.tokens).padStart(5)} tokens`,
    );

  return {
    before,
    after,
    resumeMs,
    movedBytes: figures.bytes,
    moveMs: figures.transferMs,
    verifyMs: figures.verifyMs,
    engineLoadMs: figures.engineLoadMs,
    from: figures.from,
    contextTokens: resumed.tokens,
    prefillMs,
    prefillTokens: recomputed.reply!.promptTokens,
    denials,
  };
}

async function summary(agents: AgentClient, figures: Figures, metrics: string): Promise<void> {
  step('summary');
  const ids = [...handles.keys()];
  console.log('  agent                    tenant  phase     tier    tokens  blocks  shared  turns  events  history');
  for (const id of ids) {
    const s = await agents.status(id);
    const d = await agents.workflow(id).describe();
    console.log(
      `  ${id.padEnd(24)} ${s.tenant.padEnd(7)} ${s.phase.padEnd(9)} ${s.tier.padEnd(7)} ${String(s.tokens).padStart(6)}  ` +
        `${String(s.blocks).padStart(6)}  ${String(s.sharedBlocks).padStart(6)}  ${String(s.turns).padStart(5)}  ` +
        `${String(d.historyLength).padStart(6)}  ${`${((d.historySize ?? 0) / 1024).toFixed(1)} KiB`.padStart(8)}`,
    );
  }
  console.log('  the planner before the pause:');
  for (const reply of figures.before) console.log(`    ${quote(reply)}`);
  console.log(`  ...and after its resume from ${figures.from}:\n    ${quote(figures.after)}`);
  console.log(
    `  resume of ${figures.contextTokens} tokens (${(figures.movedBytes / KiB).toFixed(0)} KiB of KV): ` +
      `${figures.resumeMs.toFixed(0)} ms through Temporal (moved in ${figures.moveMs.toFixed(0)} ms, ` +
      `verified in ${figures.verifyMs.toFixed(0)} ms, into the model in ${figures.engineLoadMs.toFixed(0)} ms); ` +
      `re-prefilling the conversation (${figures.prefillTokens} tokens): ` +
      `${figures.prefillMs.toFixed(0)} ms, ${(figures.prefillMs / figures.resumeMs).toFixed(1)}x longer`,
  );
  console.log(`  denied resumes: ${figures.denials.join('; ')}`);
  const scraped = await fetch(`http://${metrics}/metrics`)
    .then((r) => r.text())
    .catch(() => '');
  const lines = scraped.split('\n').filter((l) => /^kvfabric_(transfer_bytes|denials|pool_blocks\{[^}]*state="used")/.test(l));
  if (lines.length > 0) console.log(`  worker metrics:\n${lines.map((l) => `    ${l}`).join('\n')}`);

  step('release');
  for (const handle of handles.values()) await handle.release();
  console.log(`  all agents released; their conversations stay browsable (decoded) in the Web UI, e.g.`);
  console.log(`  ${uiUrl}/namespaces/default/workflows?query=${encodeURIComponent('KvTenant="acme"')}`);
}

// ---- helpers ----

const handles = new Map<string, AgentHandle>();
/** Each agent's conversation so far, for the recomputation. */
const transcripts = new Map<string, string[]>();
let uiUrl = '';

async function start(agents: AgentClient, agentId: string, tenant: string, timers: typeof HOURS): Promise<AgentHandle> {
  const handle = await agents.start({ agentId, tenant, model: MODEL, config: { timers, timeouts: TIMEOUTS } });
  handles.set(agentId, handle);
  return handle;
}

async function say(agent: AgentHandle, message: string): Promise<string> {
  const started = performance.now();
  const { reply, promptTokens, replyTokens } = await agent.say(message, GENERATION);
  const ms = performance.now() - started;
  transcripts.set(agent.agentId, [...(transcripts.get(agent.agentId) ?? []), `User: ${message}`, `Assistant: ${reply}`]);
  const shown = message.length > 70 ? `${message.slice(0, 32)}...${message.slice(-34)}` : message;
  console.log(`  ${agent.agentId.padEnd(18)} > ${shown}`);
  console.log(`  ${''.padEnd(18)} < ${quote(reply)}   (${promptTokens} + ${replyTokens} tokens, ${ms.toFixed(0)} ms)`);
  return reply;
}

function conversationText(agentId: string): string {
  return (transcripts.get(agentId) ?? []).join('\n');
}

function quote(text: string): string {
  return JSON.stringify(text.trim());
}

function show(s: AgentStatus): void {
  const kib = (s.tokens * BYTES_PER_TOKEN) / KiB;
  console.log(
    `  ${s.agentId.padEnd(18)} ${s.phase.padEnd(8)} ${s.tier.padEnd(7)} ${String(s.tokens).padStart(4)} tokens ` +
      `(${kib.toFixed(0).padStart(5)} KiB) in ${String(s.blocks).padStart(3)} blocks` +
      `${s.sharedBlocks > 0 ? `, ${s.sharedBlocks} shared` : ''}${s.parentId ? `, fork of ${s.parentId}` : ''}`,
  );
}

function step(title: string): void {
  console.log(`\n== ${title}`);
}

async function waitForListing(agents: AgentClient, tenant: string, count: number) {
  // Visibility is eventually consistent: the search attributes of the last updates land shortly after.
  for (let i = 0; ; i++) {
    const listed = (await agents.list({ tenant })).agents;
    if (listed.length >= count || i > 50) return listed.sort((a, b) => a.agentId.localeCompare(b.agentId));
    await sleep(100);
  }
}

interface WorkerProcess {
  child: ChildProcess;
  exited: Promise<number | string>;
  metrics: string;
  log(): string;
}

function keyText(keys: readonly RawKey[]): string {
  return keys.map(({ id, key }) => `${id}=${key.toString('base64')}`).join(',');
}

async function startWorker(server: DevServer, keys: { trusted: RawKey[]; codecKeys: RawKey[] }): Promise<WorkerProcess> {
  uiUrl = server.uiUrl ?? '';
  const metrics = `127.0.0.1:${await freePort()}`;
  const key = randomBytes(32).toString('base64');
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      join(ROOT, 'src', 'worker', 'main.ts'),
      ...['--address', server.address, '--task-queue', TASK_QUEUE, '--worker-id', 'demo-gpu-1', '--engine', 'llama', '--model', MODEL.name],
      ...[
        '--context-length',
        '2048',
        '--device-blocks',
        '256',
        '--host-blocks',
        '512',
        '--tier-dir',
        join(DEMO_DIR, 'tiers'),
        '--metrics',
        metrics,
      ],
    ],
    // Keys are generated for this run and handed over in the environment only; the worker gets no signing key.
    {
      cwd: ROOT,
      env: {
        ...process.env,
        KVFABRIC_KEYS: `demo=${key}`,
        KVFABRIC_TRUSTED_KEYS: keyText(keys.trusted),
        KVFABRIC_CODEC_KEYS: keyText(keys.codecKeys),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const logFile = createWriteStream(join(DEMO_DIR, 'worker.log'));
  let log = '';
  const exited = new Promise<number | string>((done) => child.once('exit', (code, signal) => done(signal ?? code ?? -1)));
  await new Promise<void>((ready, fail) => {
    const onData = (chunk: Buffer) => {
      log += chunk.toString();
      logFile.write(chunk);
      if (log.includes('kvfabric GPU worker ready')) ready();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((how) => fail(new Error(`the worker exited (${how}) before it was ready:\n${log}`)));
  });
  return { child, exited, metrics, log: () => log };
}

async function preferredPort(port: number): Promise<number> {
  const { createServer } = await import('node:net');
  const free = await new Promise<boolean>((done) => {
    const probe = createServer().once('error', () => done(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => done(true)));
  });
  return free ? port : freePort();
}

function relative(path: string): string {
  return path.startsWith(ROOT) ? path.slice(ROOT.length + 1) : path;
}

function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

main().catch((err: unknown) => {
  console.error(err instanceof FabricError ? `${err.code}: ${err.message}` : err);
  process.exit(1);
});
