// kvfabric as a package: `npm run build` compiles to dist/ and writes the workflow bundle, `npm pack`
// packs it, and the tarball installs into a scratch project, where install builds the addon alone (no
// C++ test, no stand-in CUDA driver), every entry point loads from compiled JavaScript with its types,
// the allocator runs, and both command lines answer --help. Dependencies come from npm's cache when it
// has them (--prefer-offline). Then the installed worker and CLI run a turn on a dev server.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { keyListText, TEST_CODEC_KEYS, TEST_SIGNING_KEYS, TEST_TRUSTED_KEYS } from '../security/test-keys';

const ROOT = join(__dirname, '..', '..');
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
let scratch: string;

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): string {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', timeout: 300_000, env: { ...env, npm_config_audit: 'false', npm_config_fund: 'false' } });
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed (${result.status ?? result.signal}):\n${result.stdout}\n${result.stderr}`);
  return result.stdout;
}

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-package-'));
  run('npm', ['run', 'build'], ROOT);
  run('npm', ['pack', '--pack-destination', scratch], ROOT);
  const tarball = readdirSync(scratch).find((name) => name.endsWith('.tgz'))!;
  // The same stand-ins for node-llama-cpp's other platforms' binaries as kvfabric's own package.json.
  const { overrides } = require(join(ROOT, 'package.json')) as { overrides: Record<string, string> };
  writeFileSync(join(scratch, 'package.json'), JSON.stringify({ name: 'scratch', version: '1.0.0', private: true, overrides }));
  run('npm', ['install', `./${tarball}`, '--prefer-offline'], scratch);
}, 600_000);

afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

it('installs with the addon built and nothing of the C++ tests', () => {
  const native = join(scratch, 'node_modules', 'kvfabric', 'build', 'native');
  const built = readdirSync(native);
  expect(built).toContain('kvfabric.node');
  expect(built.filter((name) => /core_test|fakecuda/.test(name))).toEqual([]);
  expect(existsSync(join(scratch, 'node_modules', 'kvfabric', 'native', 'test'))).toBe(false);
  expect(existsSync(join(scratch, 'node_modules', 'kvfabric', 'build', 'workflow-bundle.js'))).toBe(true);
  expect(existsSync(join(scratch, 'node_modules', 'tsx'))).toBe(false); // compiled JavaScript runs without it
});

it('loads every entry point from compiled JavaScript and runs the allocator', () => {
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
  const out = JSON.parse(run(process.execPath, ['-e', script], scratch)) as { kinds: string[]; freeBlocks: number; resolved: string };
  expect(out.kinds).toEqual(Array(8).fill('function'));
  expect(out.freeBlocks).toBe(8);
  expect(out.resolved).toMatch(/node_modules\/kvfabric\/dist\/src\/plugin\/index\.js$/);
});

it('gives a TypeScript user the types of its entry points', () => {
  writeFileSync(join(scratch, 'check.ts'), `
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
  `);
  run(process.execPath, [TSC, '--noEmit', '--strict', '--skipLibCheck', '--module', 'node16', '--moduleResolution', 'node16', 'check.ts'], scratch);
});

it('answers --help from both command lines', () => {
  expect(run(join(scratch, 'node_modules', '.bin', 'kvfabric'), ['--help'], scratch)).toMatch(/^Usage: kvfabric <command>/);
  expect(run(join(scratch, 'node_modules', '.bin', 'kvfabric-worker'), ['--help'], scratch)).toMatch(/^Usage: kvfabric-worker/);
});

describe('the installed commands on a dev server', () => {
  let server: DevServer;
  let worker: ChildProcess | undefined;
  beforeAll(async () => {
    server = await startDevServer();
  }, 60_000);
  afterAll(async () => {
    if (worker && worker.exitCode === null) worker.kill('SIGKILL');
    await server?.stop();
  });

  it('runs a turn through the compiled worker, which loads the prebuilt workflow bundle instead of bundling', async () => {
    const bin = (name: string) => join(scratch, 'node_modules', '.bin', name);
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      HOME: scratch,
      TEMPORAL_ADDRESS: server.address,
      KVFABRIC_KEYS: `k=${randomBytes(32).toString('base64')}`,
      KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
      KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
      KVFABRIC_SIGNING_KEYS: keyListText(TEST_SIGNING_KEYS),
      KVFABRIC_TASK_QUEUE: 'packaged',
    };
    worker = spawn(bin('kvfabric-worker'), ['--engine', 'synthetic', '--model', 'tiny', '--device-blocks', '64', '--host-blocks', '64', '--tier-dir', join(scratch, 'tiers')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    await new Promise<void>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes('kvfabric GPU worker ready')) resolve();
      };
      worker!.stdout!.on('data', onData);
      worker!.stderr!.on('data', onData);
      worker!.once('exit', (code) => reject(new Error(`the worker exited (${code}):\n${output}`)));
    });
    const started = JSON.parse(run(bin('kvfabric'), ['start', 'packed', '--tenant', 'acme', '--model', 'tiny', '--json'], scratch, env)) as { capability: string };
    const turned = JSON.parse(run(bin('kvfabric'), ['turn', 'packed', '--tokens', '20', '--request-id', 'r1', '--json'], scratch, { ...env, KVFABRIC_CAPABILITY: started.capability })) as { tokens: number; turns: number; holder: string };
    expect(turned).toMatchObject({ tokens: 20, turns: 1 });
    expect(turned.holder).toMatch(/^packaged@/);
    expect(output).not.toMatch(/Workflow bundle created/);
    worker.kill('SIGTERM');
    expect(await new Promise((resolve) => worker!.once('exit', (code) => resolve(code)))).toBe(0);
  }, 120_000);
});
