// kvfabric as a newcomer meets it: the README's quick start, run as printed (./readme-quick-start.ts reads
// it out of README.md, so the two cannot drift). It starts from a fresh `git clone` of this repository
// (HEAD, with the working tree's uncommitted files laid over it: what the next commit holds), beside an
// empty directory, with a Python virtual environment as the user's `python3` and nothing of Temporal on
// PATH. Every shell line of the section runs in bash byte for byte, in order, in one terminal (the lines
// "in a terminal of its own" beside it); every snippet is written to the file its first line names, and
// docs/plugin.md's TypeScript settings are the tsconfig.json, also as printed. The only thing the test adds
// is npm's prefer-offline setting in the environment (dependencies from npm's cache when it has them).
// Then what the user sees: a lean install, types, the worker and client on the README's dev server,
// kvfabric's own ticket example (examples/ticket-agent) compiled in that project against the package, a
// SIGTERM drain, and a client holding another codec key.
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';

import { Client, Connection } from '@temporalio/client';
import type { Payload } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { codecKeyRingFromEnv } from '../../src/client/client-security';
import { ensureDefaultModel } from '../../src/engines/llama/default-model';
import { NODE_LLAMA_CPP_VERSION } from '../../src/engines/llama/node-llama-cpp';
import { readClaimsUnverified } from '../../src/security/capability-issuer';
import type { CapabilityClaims } from '../../src/security/claims';
import { ENCRYPTED_ENCODING, EncryptionCodec } from '../../src/security/payload-codec';
import { quickStartOf, recommendedTsconfig, type ShellLine } from './readme-quick-start';
import { Terminal } from './terminal';
import { exec, execOk, RunningProgram } from './user-process';

const ROOT = join(__dirname, '..', '..');
/** The bound for a CPU install (it was 993 MB with llama.cpp's GPU and ARM builds). */
const MAX_NODE_MODULES_BYTES = 450e6;
/** What "in seconds" means for a wrong codec key (it used to take 20 s, then retry forever). */
const CODEC_MISMATCH_WITHIN_MS = 15_000;
/** `temporal server start-dev` as printed: the address every program of the quick start reaches by default. */
const DEV_SERVER = { host: 'localhost', port: 7233, uiPort: 8233 };
/** The ticket example, written as it would be in a project of yours: these imports become the package's. */
const TICKET_EXAMPLE = join('examples', 'ticket-agent');
const TICKET_FILES = ['workflows.ts', 'activities.ts', 'worker.ts', 'client.ts'];
const PUBLIC_ENTRIES: Record<string, string> = {
  '../../src/client': 'kvfabric/client',
  '../../src/plugin': 'kvfabric/plugin',
  '../../src/workflows/agent-child': 'kvfabric/workflows/child',
};
/** The example's call tokens (activities.ts: CALL_TOKEN_LIFETIME_S). */
const CALL_TOKEN_LIFETIME_S = 360;

const quick = quickStartOf(readFileSync(join(ROOT, 'README.md'), 'utf8'));
const tsconfig = recommendedTsconfig(readFileSync(join(ROOT, 'docs', 'plugin.md'), 'utf8'));
let scratch: string;
let clone: string;
let project: string;
let terminal: Terminal;
const running: RunningProgram[] = [];
/** The README's worker, each time it was started. */
const userWorkers: RunningProgram[] = [];

/**
 * A newcomer's shell: this process's environment without what npm, vitest or an earlier kvfabric or
 * Temporal setting put there, `python3` from a fresh virtual environment, and no `temporal` on PATH.
 */
function newcomerEnv(python: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!/^(npm_|KVFABRIC_|TEMPORAL_|VITEST)/.test(name) && name !== 'NODE_ENV') env[name] = value;
  }
  const path = (process.env.PATH ?? '').split(delimiter).filter((dir) => dir && !existsSync(join(dir, 'temporal')));
  return { ...env, PATH: [join(python, 'bin'), ...path].join(delimiter), npm_config_prefer_offline: 'true' };
}

/** The line's own environment on top of the terminal's. */
const envOf = (line: ShellLine, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({ ...terminal.env, ...line.env, ...extra });

const bin = (name: string) => join(project, 'node_modules', '.bin', name);

/** HEAD's clone gets the working tree's files that git does not ignore: what committing them would give. */
function overlayWorkingTree(from: string, to: string): void {
  const listed = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: from, encoding: 'utf8' });
  for (const path of listed.split('\0').filter(Boolean)) {
    const source = join(from, path);
    const target = join(to, path);
    if (!existsSync(source)) rmSync(target, { force: true });
    else if (!lstatSync(source).isSymbolicLink()) {
      mkdirSync(dirname(target), { recursive: true });
      copyFileSync(source, target);
    }
  }
}

async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.once('connect', () => (socket.destroy(), resolve(false)));
    socket.once('error', () => resolve(true));
  });
}

/** The README's worker line, in a terminal of its own, once it is ready. */
async function startUserWorker(): Promise<RunningProgram> {
  const worker = terminal.start(quick.runWorker.text);
  running.push(worker);
  userWorkers.push(worker);
  await worker.waitFor(/kvfabric GPU worker ready/, 180_000);
  return worker;
}

/** The user's worker that is running, else a new one. */
async function userWorker(): Promise<RunningProgram> {
  const last = userWorkers.at(-1);
  return last?.running ? last : startUserWorker();
}

/** The kvfabric CLI with the client's environment from the README (codec and signing keys). */
async function cli(args: string[], capability?: string): Promise<Record<string, unknown>> {
  const env = envOf(quick.runClient, capability ? { KVFABRIC_CAPABILITY: capability } : {});
  return JSON.parse(await execOk(bin('kvfabric'), [...args, '--json'], { cwd: project, env, timeoutMs: 180_000 })) as Record<
    string,
    unknown
  >;
}

beforeAll(async () => {
  ensureDefaultModel(); // the user's `npx kvfabric model` finds it in the shared cache that `npm test`'s set-up filled
  for (const port of [DEV_SERVER.port, DEV_SERVER.uiPort]) {
    if (!(await portFree(port)))
      throw new Error(`port ${port} is taken: the README's \`temporal server start-dev\` needs it; stop what listens there`);
  }
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-newcomer-'));
  clone = join(scratch, 'kvfabric');
  const started = Date.now();
  await execOk('git', ['clone', '--quiet', ROOT, clone], { cwd: scratch, env: process.env });
  overlayWorkingTree(ROOT, clone);
  await execOk('python3', ['-m', 'venv', join(scratch, 'python')], { cwd: scratch, env: process.env });
  terminal = new Terminal(scratch, newcomerEnv(join(scratch, 'python')));
  const timings = [`clone and virtual environment: ${((Date.now() - started) / 1000).toFixed(1)} s`];

  let wroteTsconfig = false;
  for (const step of quick.steps) {
    if (step.kind === 'write') {
      writeFileSync(join(terminal.cwd, step.file), step.body);
      if (!wroteTsconfig) writeFileSync(join(terminal.cwd, 'tsconfig.json'), tsconfig);
      wroteTsconfig = true;
      continue;
    }
    if (step.line === quick.runWorker.text) break; // the user's programs: the tests below run them
    const began = Date.now();
    if (step.background) {
      if (!/\btemporal server start-dev\b/.test(step.line)) throw new Error(`README quick start: no wait known for \`${step.line}\``);
      const server = terminal.start(step.line);
      running.push(server);
      // What a reader waits for before the next line: the server saying where it serves.
      await server.waitFor(new RegExp(`Temporal Server:\\s+${DEV_SERVER.host}:${DEV_SERVER.port}\\b`), 60_000);
    } else {
      await terminal.run(step.line);
    }
    timings.push(`${step.line.slice(0, 60)}: ${((Date.now() - began) / 1000).toFixed(1)} s`);
  }
  project = terminal.cwd;
  console.log(`the README's quick start up to the worker, ${((Date.now() - started) / 1000).toFixed(0)} s:\n  ${timings.join('\n  ')}`);
}, 1_500_000);

afterAll(async () => {
  for (const program of running.reverse()) await program.stop('SIGKILL');
  terminal?.close();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe('the package, installed by the README', () => {
  it('is made in a fresh clone by `npm ci` and `npm pack` alone: the tarball holds the compiled JavaScript and the workflow bundle', () => {
    const tarball = join(clone, readdirSync(clone).find((name) => name.endsWith('.tgz'))!);
    const listed = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).split('\n');
    expect(listed).toEqual(
      expect.arrayContaining(['package/dist/src/cli/kvfabric.js', 'package/dist/src/worker/main.js', 'package/build/workflow-bundle.js']),
    );
    expect(listed).toContain('package/dist/src/workflows/agent-child.d.ts');
  });

  it(`installs lean: node_modules under 450 MB, node-llama-cpp ${NODE_LLAMA_CPP_VERSION} with its CPU build alone, Temporal whole`, () => {
    const modules = join(project, 'node_modules');
    const bytes = Number(execFileSync('du', ['-sk', modules], { encoding: 'utf8' }).split('\t')[0]) * 1024;
    console.log(`node_modules of the README's install: ${(bytes / 1e6).toFixed(0)} MB`);
    expect(bytes).toBeLessThan(MAX_NODE_MODULES_BYTES);
    expect(JSON.parse(readFileSync(join(modules, 'node-llama-cpp', 'package.json'), 'utf8')).version).toBe(NODE_LLAMA_CPP_VERSION);
    expect(readdirSync(join(modules, '@node-llama-cpp'))).toEqual(['linux-x64']);
    // What Temporal's worker needs at run time: its native core and the compiler that bundles workflows.
    expect(existsSync(join(modules, '@temporalio', 'core-bridge', 'releases', 'x86_64-unknown-linux-gnu'))).toBe(true);
    expect(existsSync(join(modules, '@swc', 'core-linux-x64-gnu'))).toBe(true);
  });

  it('builds the addon on install and nothing of the C++ tests', () => {
    const native = join(project, 'node_modules', 'kvfabric', 'build', 'native');
    const built = readdirSync(native);
    expect(built).toContain('kvfabric.node');
    expect(built.filter((name) => /core_test|fakecuda/.test(name))).toEqual([]);
    expect(existsSync(join(project, 'node_modules', 'kvfabric', 'native', 'test'))).toBe(false);
    expect(existsSync(join(project, 'node_modules', 'kvfabric', 'build', 'workflow-bundle.js'))).toBe(true);
    expect(existsSync(join(project, 'node_modules', 'tsx'))).toBe(false); // compiled JavaScript runs without it
  });

  it('gives a TypeScript user the types of its entry points', async () => {
    writeFileSync(
      join(project, 'check.ts'),
      `
      import { KvFabricWorkerPlugin, type KvFabricWorkerPluginOptions } from 'kvfabric/plugin';
      import { AgentClient, type CallOptions } from 'kvfabric/client';
      import type { AgentStatus } from 'kvfabric/workflows';
      import { startAgentChild } from 'kvfabric/workflows/child';
      const once: CallOptions = { requestId: 'r' };
      const phase: AgentStatus['phase'] = 'idle';
      export const used = [KvFabricWorkerPlugin, AgentClient, startAgentChild, once, phase] as const;
      export type Options = KvFabricWorkerPluginOptions['tierDir'];
      // @ts-expect-error: a turn's options take a request id, nothing else
      export const wrong: CallOptions = { updateId: 'x' };
    `,
    );
    await execOk(
      process.execPath,
      [
        join(project, 'node_modules', 'typescript', 'bin', 'tsc'),
        ...['--noEmit', '--strict', '--skipLibCheck', '--module', 'node16', '--moduleResolution', 'node16', 'check.ts'],
      ],
      { cwd: project, env: terminal.env },
    );
  }, 120_000);

  it('answers --help from both command lines', async () => {
    expect(await execOk(bin('kvfabric'), ['--help'], { cwd: project, env: terminal.env })).toMatch(/^Usage: kvfabric <command>/);
    expect(await execOk(bin('kvfabric-worker'), ['--help'], { cwd: project, env: terminal.env })).toMatch(/^Usage: kvfabric-worker/);
  });
});

// node-llama-cpp is an optional peer dependency: a client, or a worker with the synthetic engine, runs
// without it. It is moved aside here (a real missing package, as after `npm install kvfabric` alone).
describe('without node-llama-cpp', () => {
  const installed = () => join(project, 'node_modules', 'node-llama-cpp');
  const aside = () => join(project, 'node_modules', '.node-llama-cpp-aside');
  beforeAll(() => renameSync(installed(), aside()));
  afterAll(() => {
    if (existsSync(aside())) renameSync(aside(), installed());
  });

  it('loads every entry point from compiled JavaScript and runs the allocator', async () => {
    const script = `
      const { NativeAllocator } = require('kvfabric');
      const { KvFabricWorkerPlugin, KvFabricClientPlugin } = require('kvfabric/plugin');
      const { AgentClient } = require('kvfabric/client');
      const { TieredMemory, ColdStore } = require('kvfabric/tiers');
      const { agentWorkflow } = require('kvfabric/workflows');
      const { createGpuWorker } = require('kvfabric/worker');
      const pool = new NativeAllocator({ shape: { layers: 2, kvHeads: 2, headDim: 16, dtypeBytes: 2 }, tokensPerBlock: 16, blockCount: 8, backend: 'cpu' });
      const ctx = pool.createContext(1);
      console.log(JSON.stringify({
        kinds: [NativeAllocator, KvFabricWorkerPlugin, KvFabricClientPlugin, AgentClient, TieredMemory, ColdStore, agentWorkflow, createGpuWorker].map((x) => typeof x),
        freeBlocks: pool.stats().freeBlocks,
        resolved: require.resolve('kvfabric/plugin'),
      }));
      pool.close();`;
    const out = JSON.parse(await execOk(process.execPath, ['-e', script], { cwd: project, env: terminal.env })) as {
      kinds: string[];
      freeBlocks: number;
      resolved: string;
    };
    expect(out.kinds).toEqual(Array(8).fill('function'));
    expect(out.freeBlocks).toBe(8);
    expect(out.resolved).toMatch(/node_modules\/kvfabric\/dist\/src\/plugin\/index\.js$/);
  });

  it('a llama worker stops at once with one line that names the package and its install command', async () => {
    const worker = await exec(bin('kvfabric-worker'), ['--tier-dir', join(scratch, 'kv-no-llama')], {
      cwd: project,
      env: envOf(quick.runWorker),
      timeoutMs: 120_000,
    });
    expect(worker.code, worker.stderr).toBe(1);
    expect(worker.stderr).toContain(
      `node-llama-cpp ${NODE_LLAMA_CPP_VERSION}, which is not installed: npm install node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`,
    );
    expect(worker.stderr).toMatch(/\(UNAVAILABLE\)$/m);
    expect(worker.stderr).not.toMatch(/^\s+at /m); // no stack trace
  }, 150_000);

  it('a synthetic worker runs a turn, from the prebuilt workflow bundle instead of bundling', async () => {
    const worker = new RunningProgram(
      bin('kvfabric-worker'),
      [
        '--engine',
        'synthetic',
        '--model',
        'tiny',
        '--device-blocks',
        '64',
        '--host-blocks',
        '64',
        '--task-queue',
        'packaged',
        '--tier-dir',
        join(scratch, 'kv-synthetic'),
      ],
      {
        cwd: project,
        env: envOf(quick.runWorker),
      },
    );
    running.push(worker);
    await worker.waitFor(/kvfabric GPU worker ready/, 120_000);
    const started = await cli(['start', 'packed', '--tenant', 'acme', '--model', 'tiny', '--task-queue', 'packaged']);
    const turned = await cli(
      ['turn', 'packed', '--tokens', '20', '--request-id', 'r1', '--task-queue', 'packaged'],
      started.capability as string,
    );
    expect(turned).toMatchObject({ tokens: 20, turns: 1 });
    const status = await cli(['status', 'packed']);
    expect(status).toMatchObject({ tokens: 20, turns: 1 });
    expect(status.holder).toMatch(/^packaged@/);
    expect(worker.output).not.toMatch(/Workflow bundle created/);
    expect(await worker.stop('SIGTERM')).toBe(0);
  }, 240_000);
});

describe("without llama.cpp's CPU build (node-llama-cpp alone)", () => {
  const installed = () => join(project, 'node_modules', '@node-llama-cpp', 'linux-x64');
  const aside = () => join(project, 'node_modules', '@node-llama-cpp', '.linux-x64-aside');
  beforeAll(() => renameSync(installed(), aside()));
  afterAll(() => {
    if (existsSync(aside())) renameSync(aside(), installed());
  });

  it('a llama worker stops at once with one line that names the binary package to install', async () => {
    const worker = await exec(bin('kvfabric-worker'), ['--tier-dir', join(scratch, 'kv-no-binary')], {
      cwd: project,
      env: envOf(quick.runWorker),
      timeoutMs: 120_000,
    });
    expect(worker.code, worker.stderr).toBe(1);
    expect(worker.stderr).toContain(
      `found no prebuilt llama.cpp binary for this machine (CPU): npm install @node-llama-cpp/linux-x64@${NODE_LLAMA_CPP_VERSION}`,
    );
    expect(worker.stderr).toMatch(/\(UNAVAILABLE\)$/m);
    expect(worker.stderr).not.toMatch(/^\s+at /m);
  }, 150_000);
});

describe("the README's quick start, as a user runs it", () => {
  it("compiled the snippets as printed, with docs/plugin.md's tsconfig.json as printed", () => {
    for (const step of quick.steps) if (step.kind === 'write') expect(readFileSync(join(project, step.file), 'utf8')).toBe(step.body);
    expect(readFileSync(join(project, 'tsconfig.json'), 'utf8')).toBe(tsconfig);
    expect(existsSync(join(project, quick.runWorker.argv[1]!))).toBe(true);
    expect(existsSync(join(project, quick.runClient.argv[1]!))).toBe(true);
  });

  it("runs the user's worker and client: the client prints the model's reply and the agent resumed from disk", async () => {
    const worker = await userWorker();
    const clientRun = await exec('bash', ['-c', quick.runClient.text], { cwd: project, env: terminal.env, timeoutMs: 240_000 });
    expect(clientRun.code, `${clientRun.stdout}\n${clientRun.stderr}\n--- worker:\n${worker.output}`).toBe(0);
    console.log(`the README's client, ${clientRun.ms} ms: ${clientRun.stdout.trim()}`);
    // console.log(reply, status.tier, status.tokens, status.lastResume?.from, status.lastResume?.transferMs)
    const printed = /^([\s\S]*\S)\s+device\s+(\d+)\s+disk\s+(\d+(?:\.\d+)?(?:e-?\d+)?)\s*$/.exec(clientRun.stdout);
    expect(printed, clientRun.stdout).not.toBeNull();
    expect(printed![1]!.trim().length).toBeGreaterThan(0);
    expect(Number(printed![2])).toBeGreaterThan(0);
  }, 480_000);

  it("keeps the user's worker log quiet when nothing is wrong: no warning, no error", () => {
    expect(userWorkers[0]!.output).toContain('kvfabric GPU worker ready');
    expect(userWorkers[0]!.output.split('\n').filter((line) => /\[(WARN|ERROR)\]/.test(line))).toEqual([]);
  });
});

describe('examples/ticket-agent in the same project, against the package', () => {
  const TICKET_ID = '4417';

  it("compiles with the README's `tsc` line once its imports are the package's", async () => {
    mkdirSync(join(project, 'ticket-agent'));
    for (const file of TICKET_FILES) {
      let source = readFileSync(join(clone, TICKET_EXAMPLE, file), 'utf8');
      for (const [inRepo, entry] of Object.entries(PUBLIC_ENTRIES)) source = source.replaceAll(`from '${inRepo}'`, `from '${entry}'`);
      expect(source, `${file} imports only kvfabric's public entry points`).not.toMatch(/from '\.\.\/\.\.\//);
      writeFileSync(join(project, 'ticket-agent', file), source);
    }
    const tsc = quick.steps.find((step) => step.kind === 'run' && /\btsc\b/.test(step.line));
    if (tsc?.kind !== 'run') throw new Error('README quick start: no line runs tsc');
    await terminal.run(tsc.line);
    for (const file of TICKET_FILES) expect(existsSync(join(project, 'ticket-agent', file.replace(/\.ts$/, '.js')))).toBe(true);
  }, 180_000);

  it("runs a ticket beside the README's worker: two answers, the agent parked on disk and back, then released", async () => {
    await userWorker(); // the agents' queue
    const { KVFABRIC_CODEC_KEYS_FILE, KVFABRIC_SIGNING_KEYS_FILE } = quick.runClient.env;
    const ticketWorker = terminal.start('node ticket-agent/worker.js', { KVFABRIC_CODEC_KEYS_FILE, KVFABRIC_SIGNING_KEYS_FILE });
    running.push(ticketWorker);
    await ticketWorker.waitFor(/ticket worker ready/, 120_000);
    // Whoever opens tickets holds the codec keys alone.
    const opened = await exec('node', ['ticket-agent/client.js', TICKET_ID], {
      cwd: project,
      env: { ...terminal.env, KVFABRIC_CODEC_KEYS_FILE },
      timeoutMs: 300_000,
    });
    expect(opened.code, `${opened.stdout}\n${opened.stderr}\n--- ticket worker:\n${ticketWorker.output}`).toBe(0);
    console.log(`the ticket, ${opened.ms} ms:\n${opened.stdout}`);
    const lines = opened.stdout.trim().split('\n');
    expect(lines.filter((line) => /^agent: \S/.test(line))).toHaveLength(2);
    expect(opened.stdout).toMatch(/\(the agent waited on disk; back from disk in \d+(\.\d+)? ms\)/);
    expect(lines.at(-1)).toBe(`ticket ${TICKET_ID} closed, agent ticket-${TICKET_ID} released`);
    // The agent's last status: released by the ticket, after two turns and one resume from disk.
    expect(await cli(['status', `ticket-${TICKET_ID}`])).toMatchObject({ phase: 'released', turns: 2, lastResume: { from: 'disk' } });
  }, 480_000);

  it("holds no caller's capability in the ticket's history: only the agent's custodian; the agent's own holds one-right tokens of minutes", async () => {
    const codec = new EncryptionCodec(
      codecKeyRingFromEnv({ KVFABRIC_CODEC_KEYS_FILE: join(project, quick.runClient.env.KVFABRIC_CODEC_KEYS_FILE!) }),
    );
    const connection = await Connection.connect({ address: `${DEV_SERVER.host}:${DEV_SERVER.port}` });
    try {
      const client = new Client({ connection }); // payloads as stored: sealed
      const tokensOf = async (workflowId: string) => tokensIn(await client.workflow.getHandle(workflowId).fetchHistory(), codec);
      const ticket = await tokensOf(`ticket-${TICKET_ID}`);
      expect(ticket.length).toBeGreaterThan(0); // the child's start input: its custodian
      for (const claims of ticket) expect(claims.rights).toEqual(['custody']);
      const callers = (await tokensOf(`kvagent-ticket-${TICKET_ID}`)).filter((claims) => !claims.rights.includes('custody'));
      expect(callers.length).toBeGreaterThanOrEqual(5); // two turns, suspend, resume, release
      for (const claims of callers) {
        expect(claims.rights).toHaveLength(1);
        expect(claims.exp - claims.iat).toBeLessThanOrEqual(CALL_TOKEN_LIFETIME_S);
      }
    } finally {
      await connection.close();
    }
  }, 120_000);
});

describe("the user's worker, stopped and replaced", () => {
  it("SIGTERM: the user's worker drains its agent, says so and exits 0; the agent resumes on a new worker", async () => {
    const worker = await userWorker();
    // No durable copy per turn: only the drain can save this context.
    const started = await cli(['start', 'keeper', '--tenant', 'acme', '--durability', 'on-offload']);
    const capability = started.capability as string;
    const turned = await cli(['turn', 'keeper', '--message', 'Remember this word: kestrel.', '--max-tokens', '12'], capability);
    expect(turned.turns).toBe(1);
    expect((await cli(['status', 'keeper'])).tier).toBe('device');

    const stopping = worker.output.length;
    expect(await worker.stop('SIGTERM')).toBe(0);
    console.log(`the user's worker after SIGTERM:\n${worker.output.slice(stopping)}`);
    expect(worker.output).toMatch(/drained[\s\S]*contexts: 1\b/);

    await userWorker();
    const resumed = await cli(['resume', 'keeper'], capability);
    expect(resumed).toMatchObject({ tier: 'device', tokens: turned.tokens });
    expect((resumed.lastResume as { from: string }).from).toBe('disk');
    const again = await cli(['turn', 'keeper', '--message', 'Which word did I give you?', '--max-tokens', '12'], capability);
    expect(again.turns).toBe(2);
    expect(again.tokens as number).toBeGreaterThan(turned.tokens as number);
  }, 600_000);

  it('a client holding another codec key gets a typed error naming the key within seconds, and listing still works', async () => {
    await userWorker();
    await execOk(bin('kvfabric'), ['keygen', '--out', 'other-keys'], { cwd: project, env: terminal.env });
    const keyIdOf = (file: string) => /^([^#=\s][^=\s]*)=/m.exec(readFileSync(join(project, file), 'utf8'))![1]!;
    const ours = keyIdOf(quick.runWorker.env.KVFABRIC_CODEC_KEYS_FILE!);
    const theirs = keyIdOf('other-keys/codec.keys');
    const env = envOf(quick.runClient, { KVFABRIC_CODEC_KEYS_FILE: 'other-keys/codec.keys' });
    const mismatch = await exec(quick.runClient.argv[0]!, quick.runClient.argv.slice(1), { cwd: project, env, timeoutMs: 120_000 });
    console.log(`client with another codec key: exit ${mismatch.code} after ${mismatch.ms} ms: ${mismatch.stderr.split('\n')[0]}`);
    expect(mismatch.code, mismatch.stdout).toBe(1);
    expect(mismatch.stderr).toMatch(/FabricError/);
    expect(mismatch.stderr).toMatch(/code: '[A-Z_]+'/);
    expect(mismatch.stderr).toMatch(new RegExp(`key '(${theirs}|${ours})'`));
    expect(mismatch.ms).toBeLessThan(CODEC_MISMATCH_WITHIN_MS);
    // No workflow left failing its tasks over and over, and the listing (with the right keys) reads past it.
    const listing = (args: string[]) =>
      execOk(bin('kvfabric'), ['list', ...args], { cwd: project, env: envOf(quick.runClient), timeoutMs: 120_000 });
    expect((JSON.parse(await listing(['--json'])) as Array<{ agentId: string }>).map((agent) => agent.agentId)).not.toContain('planner');
    expect((await listing(['--all'])).split('\n').some((line) => line.startsWith('keeper '))).toBe(true);
  }, 240_000);
});

/** The claims of every capability in a history's payloads, each decoded with the codec first. */
async function tokensIn(history: unknown, codec: EncryptionCodec): Promise<CapabilityClaims[]> {
  const payloads: Payload[] = [];
  const walk = (value: unknown): void => {
    if (value === null || typeof value !== 'object') return;
    if (value instanceof Uint8Array) return;
    const candidate = value as Partial<Payload>;
    if (candidate.data instanceof Uint8Array && candidate.metadata) payloads.push(candidate as Payload);
    else for (const inner of Object.values(value)) walk(inner);
  };
  walk(history);
  // Sealed payloads opened with the codec; the few Temporal keeps plain (search attributes) read as they are.
  const sealed = (payload: Payload) => Buffer.from(payload.metadata?.encoding ?? []).toString('utf8') === ENCRYPTED_ENCODING;
  const opened = await Promise.all(payloads.map(async (payload) => (sealed(payload) ? (await codec.decode([payload]))[0]! : payload)));
  const text = opened.map((payload) => Buffer.from(payload.data ?? []).toString('utf8')).join('\n');
  return [...text.matchAll(/eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+/g)].map((match) => readClaimsUnverified(match[0]));
}
