// kvfabric as a package: `npm run build` compiles to dist/ and writes the workflow bundle, `npm pack`
// packs it, and the tarball installs into a scratch project, where install builds the addon alone (no
// C++ test, no stand-in CUDA driver), every entry point loads from compiled JavaScript with its types,
// the allocator runs, and both command lines answer --help. Dependencies come from npm's cache when it
// has them (--prefer-offline).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, expect, it } from 'vitest';

const ROOT = join(__dirname, '..', '..');
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
let scratch: string;

function run(command: string, args: string[], cwd: string): string {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', timeout: 300_000, env: { ...process.env, npm_config_audit: 'false', npm_config_fund: 'false' } });
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
