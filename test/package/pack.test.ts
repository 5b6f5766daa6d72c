// kvfabric as a newcomer meets it: the README's quick start, run as written (./readme-quick-start.ts reads
// it out of README.md, so the two cannot drift). `npm pack` alone makes the package (its prepack builds
// the addon, dist/ and the workflow bundle); the README's own commands install it into an empty project
// (dependencies from npm's cache when it has them: --prefer-offline is the one flag added), where install
// builds the addon alone and node-llama-cpp comes with its CPU build only, node_modules under 450 MB.
// Every entry point loads from compiled JavaScript with its types, with node-llama-cpp and without it.
// Then, on a dev server that knows nothing of kvfabric (no search attributes), what the user sees: the
// README's two snippets compiled with the TypeScript settings docs/plugin.md recommends (read from it too),
// keygen and setup,
// the user's worker and client, a SIGTERM drain, and a client holding another codec key.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { ensureDefaultModel } from '../../src/engines/llama/default-model';
import { NODE_LLAMA_CPP_VERSION } from '../../src/engines/llama/node-llama-cpp';
import { asProgram, quickStartOf, recommendedCompilerOptions, sourceFileOf, type ShellLine } from './readme-quick-start';
import { exec, execOk, RunningProgram } from './user-process';

const ROOT = join(__dirname, '..', '..');
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
/** The bound for a CPU install (it was 993 MB with llama.cpp's GPU and ARM builds). */
const MAX_NODE_MODULES_BYTES = 450e6;
/** What "in seconds" means for a wrong codec key (it used to take 20 s, then retry forever). */
const CODEC_MISMATCH_WITHIN_MS = 15_000;

const quick = quickStartOf(readFileSync(join(ROOT, 'README.md'), 'utf8'));
let scratch: string;
let project: string;
let tarball: string;
let server: DevServer;
const running: RunningProgram[] = [];
let syntheticWorker: RunningProgram | undefined;
const packStarted = Date.now();

/**
 * A newcomer's shell: this process's environment without what npm, vitest or an earlier kvfabric or
 * Temporal setting put there, plus the dev server's address (the README's quick start says
 * TEMPORAL_ADDRESS points a client and a worker elsewhere than localhost:7233).
 */
function newcomerEnv(line?: ShellLine): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!/^(npm_|KVFABRIC_|TEMPORAL_|VITEST)/.test(name) && name !== 'NODE_ENV') env[name] = value;
  }
  return { ...env, ...(server ? { TEMPORAL_ADDRESS: server.address } : {}), ...line?.env };
}

const bin = (name: string) => join(project, 'node_modules', '.bin', name);

/** The README's worker line; a --tier-dir on a shared mount (an absolute path) becomes a scratch folder. */
function startUserWorker(): RunningProgram {
  const argv = quick.runWorker.argv.map((word, i, all) => (all[i - 1] === '--tier-dir' && isAbsolute(word) ? join(scratch, 'kv') : word));
  const worker = new RunningProgram(argv[0]!, argv.slice(1), { cwd: project, env: newcomerEnv(quick.runWorker) });
  running.push(worker);
  return worker;
}

/** The user's worker that is running, else a new one, once it is ready. */
async function userWorker(): Promise<RunningProgram> {
  const last = running.at(-1);
  if (last?.running && last !== syntheticWorker) return last;
  const worker = startUserWorker();
  await worker.waitFor(/kvfabric GPU worker ready/, 180_000);
  return worker;
}

/** The kvfabric CLI with the client's environment from the README (codec and signing keys). */
async function cli(args: string[], capability?: string): Promise<Record<string, unknown>> {
  const env = { ...newcomerEnv(quick.runClient), ...(capability ? { KVFABRIC_CAPABILITY: capability } : {}) };
  return JSON.parse(await execOk(bin('kvfabric'), [...args, '--json'], { cwd: project, env, timeoutMs: 180_000 })) as Record<
    string,
    unknown
  >;
}

beforeAll(async () => {
  ensureDefaultModel(); // the user's worker runs the default model; `npm test`'s set-up has cached it
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-newcomer-'));
  project = join(scratch, 'project');
  mkdirSync(project);
  writeFileSync(join(project, 'package.json'), `${JSON.stringify({ name: 'newcomer', version: '1.0.0', private: true }, null, 2)}\n`);
  server = await startDevServer({ searchAttributes: [] }); // as `temporal server start-dev` comes

  if (!quick.pack) throw new Error('README quick start: no `npm pack` line says how the package is made');
  await execOk('npm', ['pack', '--pack-destination', scratch], { cwd: ROOT, env: newcomerEnv() });
  tarball = join(scratch, readdirSync(scratch).find((name) => name.endsWith('.tgz'))!);
  for (const line of quick.setup) {
    const argv = line.argv.map((word) => (word.endsWith('.tgz') ? tarball : word));
    if (argv[0] === 'npm' && (argv[1] === 'install' || argv[1] === 'i')) argv.push('--prefer-offline');
    await execOk(argv[0]!, argv.slice(1), { cwd: project, env: newcomerEnv(line) });
  }
}, 900_000);

afterAll(async () => {
  for (const program of running) await program.stop('SIGKILL');
  await server?.stop();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe('the package, installed by the README', () => {
  it('is made by `npm pack` alone: prepack built the compiled JavaScript and the workflow bundle it ships', () => {
    for (const built of ['dist/src/cli/kvfabric.js', 'dist/src/client/index.d.ts', 'build/workflow-bundle.js']) {
      expect(statSync(join(ROOT, built)).mtimeMs, built).toBeGreaterThanOrEqual(packStarted - 1000);
    }
    const listed = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).split('\n');
    expect(listed).toEqual(
      expect.arrayContaining(['package/dist/src/cli/kvfabric.js', 'package/dist/src/worker/main.js', 'package/build/workflow-bundle.js']),
    );
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
      [TSC, '--noEmit', '--strict', '--skipLibCheck', '--module', 'node16', '--moduleResolution', 'node16', 'check.ts'],
      { cwd: project, env: newcomerEnv() },
    );
  }, 120_000);

  it('answers --help from both command lines', async () => {
    expect(await execOk(bin('kvfabric'), ['--help'], { cwd: project, env: newcomerEnv() })).toMatch(/^Usage: kvfabric <command>/);
    expect(await execOk(bin('kvfabric-worker'), ['--help'], { cwd: project, env: newcomerEnv() })).toMatch(/^Usage: kvfabric-worker/);
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
    const out = JSON.parse(await execOk(process.execPath, ['-e', script], { cwd: project, env: newcomerEnv() })) as {
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
      env: newcomerEnv(quick.runWorker),
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
        env: newcomerEnv(quick.runWorker),
      },
    );
    running.push(worker);
    syntheticWorker = worker;
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
      env: newcomerEnv(quick.runWorker),
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
  const workerSource = sourceFileOf(quick.runWorker);
  const clientSource = sourceFileOf(quick.runClient);

  it('compiles both snippets, as copied, under the TypeScript settings the docs recommend', async () => {
    // The user's own activities and workflows, which the worker snippet imports.
    writeFileSync(
      join(project, 'activities.ts'),
      // biome-ignore lint/suspicious/noTemplateCurlyInString: TypeScript source text, written to a file
      'export async function greet(name: string): Promise<string> {\n  return `Hello, ${name}`;\n}\n',
    );
    writeFileSync(
      join(project, 'workflows.ts'),
      "import { proxyActivities } from '@temporalio/workflow';\nimport type * as activities from './activities';\n\n" +
        "const { greet } = proxyActivities<typeof activities>({ startToCloseTimeout: '1 minute' });\n\n" +
        'export async function greeting(name: string): Promise<string> {\n  return greet(name);\n}\n',
    );
    writeFileSync(join(project, workerSource), quick.worker);
    writeFileSync(join(project, clientSource), asProgram(quick.client));
    const compilerOptions = {
      ...recommendedCompilerOptions(readFileSync(join(ROOT, 'docs', 'plugin.md'), 'utf8')),
      // The user's own @types/node: kvfabric's stands in for it here.
      typeRoots: [join(ROOT, 'node_modules', '@types')],
    };
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({ compilerOptions, files: [workerSource, clientSource, 'activities.ts', 'workflows.ts'] }, null, 2),
    );
    await execOk(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: project, env: newcomerEnv() });
    expect(existsSync(join(project, quick.runWorker.argv[1]!))).toBe(true);
  }, 180_000);

  it("runs the user's worker and client: the client prints the model's reply and the agent's status", async () => {
    const worker = await userWorker();
    const clientRun = await exec(quick.runClient.argv[0]!, quick.runClient.argv.slice(1), {
      cwd: project,
      env: newcomerEnv(quick.runClient),
      timeoutMs: 240_000,
    });
    expect(clientRun.code, `${clientRun.stdout}\n${clientRun.stderr}\n--- worker:\n${worker.output}`).toBe(0);
    // console.log(reply, status.tier, status.tokens, status.lastResume?.transferMs)
    const printed = /^([\s\S]*\S)\s+device\s+(\d+)\s+(\d+(?:\.\d+)?(?:e-?\d+)?)\s*$/.exec(clientRun.stdout);
    expect(printed, clientRun.stdout).not.toBeNull();
    expect(printed![1]!.trim().length).toBeGreaterThan(0);
    expect(Number(printed![2])).toBeGreaterThan(0);
  }, 480_000);

  it("keeps the user's worker log quiet when nothing is wrong: no warning, no error", () => {
    const first = running.find((program) => program !== syntheticWorker)!;
    expect(first.output).toContain('kvfabric GPU worker ready');
    expect(first.output.split('\n').filter((line) => /\[(WARN|ERROR)\]/.test(line))).toEqual([]);
  });

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
    await execOk(bin('kvfabric'), ['keygen', '--out', 'other-keys'], { cwd: project, env: newcomerEnv() });
    const keyIdOf = (file: string) => /^([^#=\s][^=\s]*)=/m.exec(readFileSync(join(project, file), 'utf8'))![1]!;
    const ours = keyIdOf(quick.runWorker.env.KVFABRIC_CODEC_KEYS_FILE!);
    const theirs = keyIdOf('other-keys/codec.keys');
    const env = newcomerEnv({ ...quick.runClient, env: { ...quick.runClient.env, KVFABRIC_CODEC_KEYS_FILE: 'other-keys/codec.keys' } });
    const mismatch = await exec(quick.runClient.argv[0]!, quick.runClient.argv.slice(1), { cwd: project, env, timeoutMs: 120_000 });
    console.log(`client with another codec key: exit ${mismatch.code} after ${mismatch.ms} ms: ${mismatch.stderr.split('\n')[0]}`);
    expect(mismatch.code, mismatch.stdout).toBe(1);
    expect(mismatch.stderr).toMatch(/FabricError/);
    expect(mismatch.stderr).toMatch(/code: '[A-Z_]+'/);
    expect(mismatch.stderr).toMatch(new RegExp(`key '(${theirs}|${ours})'`));
    expect(mismatch.ms).toBeLessThan(CODEC_MISMATCH_WITHIN_MS);
    // No workflow left failing its tasks over and over, and the listing (with the right keys) reads past it.
    const listing = (args: string[]) =>
      execOk(bin('kvfabric'), ['list', ...args], { cwd: project, env: newcomerEnv(quick.runClient), timeoutMs: 120_000 });
    expect((JSON.parse(await listing(['--json'])) as Array<{ agentId: string }>).map((agent) => agent.agentId)).not.toContain('planner');
    expect((await listing(['--all'])).split('\n').some((line) => line.startsWith('keeper '))).toBe(true);
  }, 240_000);
});
