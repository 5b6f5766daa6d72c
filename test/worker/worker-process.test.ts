// The kvfabric-worker process as an operator runs it: -h/--help, a bad flag as one line and exit 2 (as a
// JSON object under --log-format json), a Temporal that does not answer named with its address, exit 1;
// and on a dev server, a worker and a client configured only from the files `kvfabric keygen` wrote run an
// agent through a turn, a suspend to disk and a verified resume, while every line the worker logs is one
// JSON object {ts, level, msg, fields}, down to its drain at SIGTERM.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { spawnWorkerProcess } from '../../scripts/worker-process';
import { keygen } from '../../src/cli/keygen';
import { AgentClient } from '../../src/client/agent-client';
import { clientSecurityFromEnv } from '../../src/client/client-security';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { MODELS } from '../../src/engines/models';
import { runTsx } from '../cli/run-cli';

const WORKER_MAIN = join(__dirname, '..', '..', 'src', 'worker', 'main.ts');
const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-worker-process-'));
const keys = join(scratch, 'keys');
const tierDir = join(scratch, 'tier');
keygen(['--out', keys], () => undefined);
/** Every key by file, as keygen printed: the worker's three, the client's two. */
const WORKER_KEYS = {
  KVFABRIC_KEY_FILE: join(keys, 'master.keys'),
  KVFABRIC_TRUSTED_KEYS_FILE: join(keys, 'trusted.keys'),
  KVFABRIC_CODEC_KEYS_FILE: join(keys, 'codec.keys'),
};
const CLIENT_KEYS = { KVFABRIC_SIGNING_KEYS_FILE: join(keys, 'signing.keys'), KVFABRIC_CODEC_KEYS_FILE: join(keys, 'codec.keys') };
const SYNTHETIC = [
  '--engine',
  'synthetic',
  '--model',
  'tiny',
  '--backend',
  'cpu',
  '--device-blocks',
  '64',
  '--host-blocks',
  '64',
  '--tier-dir',
  tierDir,
];

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const runWorker = (args: string[], env: Record<string, string> = {}) => runTsx(WORKER_MAIN, args, env);

describe('kvfabric-worker without a server', () => {
  it('prints its usage for -h and --help, exit 0', async () => {
    for (const run of await Promise.all([runWorker(['-h']), runWorker(['--tier-dir', '/nowhere', '--help'])])) {
      expect(run).toMatchObject({ code: 0, stderr: '' });
      expect(run.stdout).toMatch(/^Usage: kvfabric-worker \[options\]/);
      expect(run.stdout).toContain('--log-format text|json');
    }
  });

  it('answers a bad flag with one line (one JSON object under --log-format json), exit 2', async () => {
    const [text, json] = await Promise.all([
      runWorker(['--backend', 'tpu', ...SYNTHETIC.slice(0, 4)], WORKER_KEYS),
      runWorker(['--log-format', 'json', '--backend', 'tpu'], WORKER_KEYS),
    ]);
    expect(text).toMatchObject({
      code: 2,
      stderr: "kvfabric-worker: --backend must be auto, cpu or cuda, got 'tpu' (see kvfabric-worker --help)\n",
    });
    expect(json.code).toBe(2);
    expect(JSON.parse(json.stderr)).toMatchObject({
      level: 'ERROR',
      msg: "--backend must be auto, cpu or cuda, got 'tpu'",
      fields: { code: 'USAGE' },
    });
  });

  it("answers a missing --tier-dir with one line naming the setting, no stack trace: kvfabric-worker (exit 2) and the README's worker (exit 1)", async () => {
    const readmeWorker = join(__dirname, '..', 'plugin', 'fixtures', 'readme-worker.ts');
    const [own, readme] = await Promise.all([runWorker([], WORKER_KEYS), runTsx(readmeWorker, [], WORKER_KEYS)]);
    const named = /--tier-dir \(or KVFABRIC_TIER_DIR\) is required/;
    expect(own).toMatchObject({ code: 2, stdout: '' });
    expect(own.stderr).toMatch(named);
    expect(own.stderr.trimEnd().split('\n')).toHaveLength(1);
    // The README's `main().catch((err) => { console.error(err); process.exit(1); })`, as written.
    expect(readme).toMatchObject({ code: 1, stdout: '' });
    expect(readme.stderr).toMatch(named);
    expect(readme.stderr.trimEnd().split('\n')).toHaveLength(1);
  });

  it('names the address and namespace it could not reach, exit 1', async () => {
    const port = await freePort();
    const run = await runWorker(['--address', `127.0.0.1:${port}`, ...SYNTHETIC], WORKER_KEYS);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(
      new RegExp(`kvfabric-worker: cannot reach Temporal at 127\\.0\\.0\\.1:${port} \\(namespace default\\): .+ \\(UNAVAILABLE\\)\\n$`),
    );
    expect(run.stderr).not.toMatch(/\n\s+at /);
  });
});

describe('kvfabric-worker on a dev server, keys from keygen, --log-format json', () => {
  let server: DevServer;
  beforeAll(async () => {
    server = await startDevServer();
  });
  afterAll(async () => server?.stop());

  it('runs an agent for a client with the same key files, logging one JSON object per line', async () => {
    const taskQueue = 'kvfabric-json-logs';
    const worker = await spawnWorkerProcess(
      'json-worker',
      ['--address', server.address, '--task-queue', taskQueue, '--log-format', 'json', '--shutdown-grace-ms', '2000', ...SYNTHETIC],
      WORKER_KEYS,
    );
    const agents = await AgentClient.connect(
      { address: server.address, namespace: 'default' },
      clientSecurityFromEnv(CLIENT_KEYS),
      taskQueue,
    );
    try {
      const agent = await agents.start({ agentId: 'json-logs', tenant: 'acme', model: MODELS.tiny! });
      expect((await agent.turn(40)).tokens).toBe(40);
      expect((await agent.suspend('disk')).tier).toBe('disk');
      const resumed = await agent.resume();
      expect(resumed).toMatchObject({ tier: 'device', tokens: 40, lastResume: { from: 'disk' } });
      await agent.release();
    } finally {
      await agents.close();
      worker.child.kill('SIGTERM');
    }
    expect(await worker.exited).toBe(0);
    const lines = worker
      .output()
      .split('\n')
      .filter((line) => line.trim() !== '');
    const entries = lines.map((line) => {
      expect(() => JSON.parse(line), line).not.toThrow();
      return JSON.parse(line) as { ts: string; level: string; msg: string; fields: Record<string, unknown> };
    });
    for (const entry of entries) {
      expect(Object.keys(entry)).toEqual(['ts', 'level', 'msg', 'fields']);
      expect(new Date(entry.ts).toISOString()).toBe(entry.ts);
      expect(['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR']).toContain(entry.level);
    }
    expect(entries.find((entry) => entry.msg === 'kvfabric GPU worker ready')?.fields).toMatchObject({
      holder: `${taskQueue}@json-worker`,
    });
    expect(entries.find((entry) => entry.msg === 'kvfabric GPU worker drained')?.fields).toMatchObject({ contexts: 0, failed: 0 });
  }, 120_000);
});
