// The main job (npm run demo): the Temporal dev server (SQLite file, Web UI), a GPU worker process and a
// scripted scenario -- two tenants, several agents, turns, a fork sharing its parent's blocks, an agent
// idling from the device to host memory to disk and resuming with its bytes verified, and resumes
// refused to agents holding the wrong capability. Prints a summary and the UI address, then shuts down
// (the worker drains to disk first). `--keep` leaves the server and its UI up until Ctrl-C.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { AgentClient, type AgentHandle } from '../client/agent-client';
import { CapabilityIssuer } from '../security/capability-issuer';
import { startCodecServer } from '../security/codec-server';
import { ed25519PublicOf, type RawKey } from '../security/key-list';
import { CodecKeyRing, EncryptionCodec } from '../security/payload-codec';
import { ContextDigest } from '../agent-memory/context-digest';
import { syntheticKv } from '../agent-memory/synthetic-kv';
import { ensureTemporalCli } from '../dev-server/temporal-cli';
import { freePort, startDevServer, type DevServer } from '../dev-server/dev-server';
import { FabricError } from '../fabric/errors';
import type { AgentStatus } from '../workflows/definitions';
import { bytesPerTokenOf } from '../fabric/layout';
import { MODELS } from '../workflows/models';

const ROOT = resolve(__dirname, '..', '..');
const DEMO_DIR = process.env.KVFABRIC_DEMO_DIR ?? join(ROOT, '.kvfabric', 'demo');
const MODEL = MODELS['llama-3-8b']!;
const BYTES_PER_TOKEN = bytesPerTokenOf(MODEL.shape);
const MiB = 1024 * 1024;
const TASK_QUEUE = 'kvfabric-demo';
const TOKENS_PER_TURN = 64; // 8 MiB of Llama-3-8B KV per turn
const DEMO_TIMERS = { idleToWarmMs: 2500, warmToColdMs: 2500 };
const HOURS = { idleToWarmMs: 3_600_000, warmToColdMs: 3_600_000 };

/** Turns each agent took, to recompute its bytes independently of the worker. */
const turnsOf = new Map<string, Array<[agentId: string, turn: number, tokens: number]>>();

async function main(): Promise<void> {
  const keep = process.argv.includes('--keep');
  console.log('kvfabric demo: agents as Temporal workflows over tiered KV memory (CPU backend: host memory stands in for the GPU)\n');

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
  const codecServer = await startCodecServer({ codec: new EncryptionCodec(codec), token: codecToken, uiOrigin: `http://localhost:${uiPort}`, port: await preferredPort(8234) });
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
      `GPU worker           pid ${worker.child.pid}: ${MODEL.name}, ${BYTES_PER_TOKEN / 1024} KiB per token; 64 device blocks (128 MiB), ` +
        `128 host blocks (256 MiB), cold tier ${relative(join(DEMO_DIR, 'tiers'))}; metrics http://${worker.metrics}/metrics\n`,
    );
    const agents = await AgentClient.connect({ address: server.address, namespace: 'default' }, { codec, issuer: new CapabilityIssuer(signing) }, TASK_QUEUE);
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
      console.log(`the CLI does too: temporal workflow show -w kvagent-acme-planner --codec-endpoint ${codecServer.url} --codec-auth "Bearer <token>"`);
      await new Promise<void>((done) => process.once('SIGINT', () => done()));
    }
    await server.stop();
    await codecServer.close();
    console.log(`dev server stopped; the history stays in ${relative(dbFile)}: \`npm run demo:ui\` serves it at http://localhost:8233 again`);
  }
}

interface Figures {
  resumeMs: number;
  restoredBytes: number;
  restoreMs: number;
  verifyMs: number;
  verified: boolean;
  denials: string[];
}

async function scenario(agents: AgentClient): Promise<Figures> {
  step('two tenants, four agents; each turn appends 64 tokens (8 MiB) of KV');
  const planner = await agents.start({ agentId: 'acme-planner', tenant: 'acme', model: MODEL, config: { timers: DEMO_TIMERS } });
  const critic = await agents.start({ agentId: 'acme-critic', tenant: 'acme', model: MODEL, config: { timers: HOURS } });
  const assistant = await agents.start({ agentId: 'globex-assistant', tenant: 'globex', model: MODEL, config: { timers: HOURS } });
  for (let i = 0; i < 3; i++) await turn(planner);
  show(await turn(planner));
  show(await turn(critic));
  await turn(assistant);
  show(await turn(assistant));

  step('fork: the researcher shares the planner\'s prefix blocks (copy-on-write)');
  const { child: researcher, status: forked } = await planner.fork('acme-researcher');
  turnsOf.set('acme-researcher', [...turnsOf.get('acme-planner')!]);
  show(forked);
  show(await turn(researcher));

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
  for (const [who, intruder] of [['acme-researcher (same tenant)', researcher], ['globex-assistant (other tenant)', assistant]] as const) {
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

  step('the planner resumes: restored from disk, every byte verified against its recorded digest');
  const started = performance.now();
  const resumed = await planner.resume();
  const resumeMs = performance.now() - started;
  show(resumed);
  const recomputed = expectedDigest('acme-planner');
  const verified = resumed.digest === recomputed;
  console.log(
    `  resume update -> restored, verified context: ${resumeMs.toFixed(0)} ms end to end ` +
      `(${(resumed.lastRestore!.bytes / MiB).toFixed(0)} MiB from ${resumed.lastRestore!.from}: restore ${resumed.lastRestore!.transferMs.toFixed(0)} ms, verify ${resumed.lastRestore!.verifyMs.toFixed(0)} ms)`,
  );
  console.log(`  digest recomputed here from the turns' KV: ${verified ? 'matches, byte-exact' : 'MISMATCH'}`);
  show(await turn(planner));

  step('agents by search attribute (what the UI filters on): KvTenant = "acme"');
  const listed = await waitForListing(agents, 'acme', 3);
  for (const a of listed) console.log(`  ${a.agentId.padEnd(18)} ${String(a.phase).padEnd(8)} ${String(a.tier).padEnd(7)} ${String(a.tokens).padStart(5)} tokens`);

  return {
    resumeMs,
    restoredBytes: resumed.lastRestore!.bytes,
    restoreMs: resumed.lastRestore!.transferMs,
    verifyMs: resumed.lastRestore!.verifyMs,
    verified,
    denials,
  };
}

async function summary(agents: AgentClient, figures: Figures, metrics: string): Promise<void> {
  step('summary');
  const ids = ['acme-planner', 'acme-researcher', 'acme-critic', 'globex-assistant'];
  console.log('  agent              tenant  phase     tier    tokens  blocks  shared  turns  events  history   digest');
  for (const id of ids) {
    const s = await agents.status(id);
    const d = await agents.workflow(id).describe();
    const ok = s.digest === expectedDigest(id) ? 'verified' : 'MISMATCH';
    console.log(
      `  ${id.padEnd(18)} ${s.tenant.padEnd(7)} ${s.phase.padEnd(9)} ${s.tier.padEnd(7)} ${String(s.tokens).padStart(6)}  ${String(s.blocks).padStart(6)}  ` +
        `${String(s.sharedBlocks).padStart(6)}  ${String(s.turns).padStart(5)}  ${String(d.historyLength).padStart(6)}  ${`${((d.historySize ?? 0) / 1024).toFixed(1)} KiB`.padStart(8)}   ${ok}`,
    );
  }
  console.log(`  resume -> restored context: ${figures.resumeMs.toFixed(0)} ms for ${(figures.restoredBytes / MiB).toFixed(0)} MiB (restore ${figures.restoreMs.toFixed(0)} ms, verify ${figures.verifyMs.toFixed(0)} ms); bytes ${figures.verified ? 'byte-exact' : 'NOT exact'}`);
  console.log(`  denied resumes: ${figures.denials.join('; ')}`);
  const scraped = await fetch(`http://${metrics}/metrics`).then((r) => r.text()).catch(() => '');
  const lines = scraped.split('\n').filter((l) => /^kvfabric_(transfer_bytes|denials|pool_blocks\{[^}]*state="used")/.test(l));
  if (lines.length > 0) console.log(`  worker metrics:\n${lines.map((l) => `    ${l}`).join('\n')}`);

  step('release');
  for (const id of ids) {
    const handle = handles.get(id)!;
    await handle.release();
  }
  console.log(`  all agents released; their histories stay browsable in the Web UI, e.g.`);
  console.log(`  ${uiUrl}/namespaces/default/workflows?query=${encodeURIComponent('KvTenant="acme"')}`);
}

// ---- helpers ----

const handles = new Map<string, AgentHandle>();
let uiUrl = '';

async function turn(agent: AgentHandle): Promise<AgentStatus> {
  handles.set(agent.agentId, agent);
  const turns = turnsOf.get(agent.agentId) ?? [];
  const own = turns.filter(([id]) => id === agent.agentId).length;
  const status = await agent.turn(TOKENS_PER_TURN);
  turns.push([agent.agentId, own, TOKENS_PER_TURN]);
  turnsOf.set(agent.agentId, turns);
  return status;
}

function expectedDigest(agentId: string): string {
  const digest = ContextDigest.fresh(BYTES_PER_TOKEN);
  for (const [id, turn, tokens] of turnsOf.get(agentId) ?? []) digest.update(syntheticKv(id, turn, tokens, BYTES_PER_TOKEN));
  return digest.finish().value;
}

function show(s: AgentStatus): void {
  const mib = (s.tokens * BYTES_PER_TOKEN) / MiB;
  console.log(
    `  ${s.agentId.padEnd(18)} ${s.phase.padEnd(8)} ${s.tier.padEnd(7)} ${String(s.tokens).padStart(4)} tokens (${mib.toFixed(0).padStart(3)} MiB) in ${String(s.blocks).padStart(3)} blocks` +
      `${s.sharedBlocks > 0 ? `, ${s.sharedBlocks} shared` : ''}${s.parentId ? `, fork of ${s.parentId}` : ''}`,
  );
}

function step(title: string): void {
  console.log(`\n== ${title}`);
}

async function waitForListing(agents: AgentClient, tenant: string, count: number) {
  // Visibility is eventually consistent: the search attributes of the last updates land shortly after.
  for (let i = 0; ; i++) {
    const listed = await agents.list({ tenant });
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
      ...['--address', server.address, '--task-queue', TASK_QUEUE, '--worker-id', 'demo-gpu-1', '--model', MODEL.name],
      ...['--device-blocks', '64', '--host-blocks', '128', '--tier-dir', join(DEMO_DIR, 'tiers'), '--metrics', metrics],
    ],
    // Keys are generated for this run and handed over in the environment only; the worker gets no signing key.
    {
      cwd: ROOT,
      env: { ...process.env, KVFABRIC_KEYS: `demo=${key}`, KVFABRIC_TRUSTED_KEYS: keyText(keys.trusted), KVFABRIC_CODEC_KEYS: keyText(keys.codecKeys) },
      stdio: ['ignore', 'pipe', 'pipe'] },
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
