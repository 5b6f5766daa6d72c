// `npx kvfabric-worker`, stopped with SIGTERM. npm runs the bin through `sh -c` and forwards the signal to
// that shell only, and dash (/bin/sh here, as on Debian and Ubuntu) dies of it without passing it on: the
// worker used to run on, orphaned, holding its contexts. Now it notices that the shell that started it is
// gone and drains as on SIGTERM. Real npm, real shell, real signal, a real dev server; the drained
// context (durability 'on-offload': in memory only) is then resumed byte-exact by another worker.
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { TEST_AGENT_CONFIG, TINY, eventually, expectedDigest, startCluster, type TestCluster } from '../temporal/harness';
import { TEST_CODEC_KEYS, TEST_TRUSTED_KEYS, keyListText } from '../security/test-keys';

const REPO = join(__dirname, '..', '..');
let cluster: TestCluster;
const project = mkdtempSync(join(tmpdir(), 'kvfabric-npx-'));

beforeAll(async () => {
  cluster = await startCluster();
  // A project where npm links kvfabric-worker, as installing the package does (there: dist/src/worker/main.js).
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'npx-user', version: '1.0.0', private: true }));
  mkdirSync(join(project, 'node_modules', '.bin'), { recursive: true });
  const bin = join(project, 'node_modules', '.bin', 'kvfabric-worker');
  writeFileSync(
    bin,
    `#!/usr/bin/env node\nrequire(${JSON.stringify(require.resolve('tsx/cjs/api'))}).register();\nrequire(${JSON.stringify(join(REPO, 'src', 'worker', 'main.ts'))});\n`,
  );
  chmodSync(bin, 0o755);
});
afterAll(async () => {
  await cluster?.close();
  rmSync(project, { recursive: true, force: true });
});

/** Running: not gone and not a zombie (an orphan's parent here may never reap it). */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const stat = (() => {
    try {
      return readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      return '';
    }
  })();
  return !/^\d+ \(.*\) Z/.test(stat);
}

it("drains on SIGTERM to `npx kvfabric-worker`, though npm's shell does not pass the signal on", async () => {
  const queue = `npx-${Math.random().toString(16).slice(2, 8)}`;
  const flags = [
    '--address',
    cluster.server.address,
    '--task-queue',
    queue,
    '--engine',
    'synthetic',
    '--model',
    'tiny',
    '--backend',
    'cpu',
  ];
  const memory = ['--device-blocks', '256', '--host-blocks', '256', '--tier-dir', cluster.tierDir, '--shutdown-grace-ms', '2000'];
  const npx = spawn('npx', ['kvfabric-worker', ...flags, ...memory], {
    cwd: project,
    env: {
      ...process.env,
      KVFABRIC_KEYS: cluster.keys,
      KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
      KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  for (const stream of [npx.stdout, npx.stderr]) stream.on('data', (chunk: Buffer) => (output += chunk.toString()));
  // The pipes close once every process holding them has exited: npm, its shell and the worker.
  let allClosed = false;
  npx.once('close', () => (allClosed = true));
  let workerPid: number | undefined;
  try {
    const ready = await eventually(
      async () => /kvfabric GPU worker ready.*holder: '([^']+)'/s.exec(output) ?? undefined,
      60_000,
      'the worker to start',
    );
    // The worker's default id is host-pid-random: its pid, a process apart from npm's.
    workerPid = Number(/-(\d+)-[0-9a-f]{6}$/.exec(ready[1]!)![1]);
    expect(workerPid).not.toBe(npx.pid);

    const agents = new AgentClient(cluster.client, queue, cluster.agents.security);
    const agent = await agents.start({
      agentId: 'npx-drained',
      tenant: 'acme',
      model: TINY,
      config: { ...TEST_AGENT_CONFIG, durability: 'on-offload' },
    });
    expect(await agent.turn(40)).toMatchObject({ tokens: 40, turns: 1 });
    expect(await agent.status()).toMatchObject({ holder: ready[1], tier: 'device', tokens: 40 });

    npx.kill('SIGTERM');
    await eventually(async () => (allClosed ? true : undefined), 60_000, 'npm, its shell and the worker to exit');
    expect(output).toMatch(/kvfabric GPU worker stopping: the npm process that started it is gone/);
    expect(output).toMatch(/kvfabric GPU worker drained.*contexts: 1,.*failed: 0/s);
    await eventually(async () => (processAlive(workerPid!) ? undefined : true), 10_000, 'the worker to exit');

    const heir = await cluster.spawnWorker({ workerId: 'npx-heir', taskQueue: queue });
    const resumed = await agent.resume();
    expect(resumed).toMatchObject({ holder: heir.holder, tier: 'device', tokens: 40, failovers: 1 });
    expect(resumed.digest).toBe(expectedDigest([['npx-drained', 0, 40]]));
    expect(resumed.lastResume).toMatchObject({ from: 'disk' });
    await agent.release();
  } finally {
    if (npx.exitCode === null && npx.signalCode === null) npx.kill('SIGKILL');
    if (workerPid !== undefined && processAlive(workerPid)) process.kill(workerPid, 'SIGKILL'); // this test's own orphan
  }
}, 180_000);
