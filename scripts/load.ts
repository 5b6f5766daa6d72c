// Load: one dev server, two GPU worker processes (CPU backend, src/worker/main.ts), N agents at once.
// Each agent takes turns, suspends to disk (the cold tier), resumes (every byte verified by the worker
// against the digest its workflow recorded, and the digest checked here against one recomputed from the
// synthetic KV), takes another turn and releases; every `forkEvery`-th agent forks a child that takes
// its own turn and releases first. Reports agent turns per second and resume p50/p95/p99, then checks the
// baseline: both workers drain with 0 contexts held (no leaked blocks) and the tier directory holds no
// segment, manifest or grant (no leaked files).
// While it runs, a progress line every few seconds: agents started, turns done of all, elapsed.
//   npm run load -- --agents 200 [--turns 3] [--tokens 24] [--fork-every 5]
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { AgentClient, type AgentConfigOverrides } from '../src/client/agent-client';
import { digestOfBytes } from '../src/agent-memory/context-digest';
import { syntheticKv } from '../src/engines/synthetic/synthetic-kv';
import { bytesPerTokenOf } from '../src/fabric/layout';
import { startDevServer } from '../src/dev-server/dev-server';
import { CapabilityIssuer } from '../src/security/capability-issuer';
import { ed25519PublicOf, keyListText } from '../src/security/key-list';
import { CodecKeyRing } from '../src/security/payload-codec';
import { MODELS } from '../src/engines/models';
import { spawnWorkerProcess, type WorkerProcess } from './worker-process';

export interface LoadOptions {
  agents: number;
  turns: number;
  tokens: number;
  forkEvery: number;
  log?: (line: string) => void;
  /** How often `log` gets a progress line (default 5 s). */
  progressEveryMs?: number;
}

export interface LoadReport {
  agents: number;
  forks: number;
  turns: number;
  seconds: number;
  turnsPerSecond: number;
  resumeMs: { p50: number; p95: number; p99: number; max: number };
  verifiedResumes: number;
  digestMismatches: number;
  drainedContexts: number[];
  leftFiles: string[];
}

const TINY = MODELS.tiny!;
const BYTES_PER_TOKEN = bytesPerTokenOf(TINY.shape);
const CONFIG: AgentConfigOverrides = {
  timers: { idleToWarmMs: 60 * 60_000, warmToColdMs: 60 * 60_000 },
  // A loaded 2-core machine queues activities for seconds: holder loss must not be mistaken for that.
  timeouts: { holderLossMs: 60_000, attemptMs: 120_000, heartbeatMs: 30_000, operationMs: 300_000 },
};

export async function runLoad(options: LoadOptions): Promise<LoadReport> {
  const log = options.log ?? (() => undefined);
  const server = await startDevServer();
  const tierDir = mkdtempSync(join(tmpdir(), 'kvfabric-load-'));
  const signing = [{ id: 's', key: randomBytes(32) }];
  const codecKeys = [{ id: 'c', key: randomBytes(32) }];
  // Workers sharing a tier directory share its master keys: each reads the manifests the other writes.
  const masterKeys = keyListText([{ id: 'k', key: randomBytes(32) }]);
  const taskQueue = `kvfabric-load-${randomBytes(3).toString('hex')}`;
  const blocks = String(Math.max(512, options.agents * 8));
  const workers: WorkerProcess[] = [];
  let agents: AgentClient | undefined;
  let progress: NodeJS.Timeout | undefined;
  try {
    for (const workerId of ['load-a', 'load-b']) {
      const args = [
        '--address',
        server.address,
        '--task-queue',
        taskQueue,
        '--backend',
        'cpu',
        '--engine',
        'synthetic',
        '--model',
        'tiny',
        '--device-blocks',
        blocks,
        '--host-blocks',
        blocks,
        '--tier-dir',
        tierDir,
        '--max-concurrent-activities',
        '16',
        '--shutdown-grace-ms',
        '10000',
      ];
      const env = {
        KVFABRIC_KEYS: masterKeys,
        KVFABRIC_TRUSTED_KEYS: keyListText(signing.map(({ id, key }) => ({ id, key: ed25519PublicOf(key) }))),
        KVFABRIC_CODEC_KEYS: keyListText(codecKeys),
      };
      workers.push(await spawnWorkerProcess(workerId, args, env));
    }
    agents = await AgentClient.connect(
      { address: server.address, namespace: 'default' },
      { codec: new CodecKeyRing(codecKeys), issuer: new CapabilityIssuer(signing) },
      taskQueue,
    );
    const client = agents;
    log(`dev server ${server.address}, 2 workers, ${options.agents} agents x ${options.turns} turns of ${options.tokens} tokens`);

    const resumeMs: number[] = [];
    let turns = 0;
    let forks = 0;
    let mismatches = 0;
    let verified = 0;
    let agentsStarted = 0;
    // Every agent's turns, its last turn after the resume, and its fork's one turn.
    const forksPlanned = options.forkEvery > 0 ? Math.ceil(options.agents / options.forkEvery) : 0;
    const turnsPlanned = options.agents * (options.turns + 1) + forksPlanned;
    const started = performance.now();
    progress = setInterval(() => {
      log(
        `progress: ${agentsStarted}/${options.agents} agents started, ${turns}/${turnsPlanned} turns done, ${((performance.now() - started) / 1000).toFixed(0)} s`,
      );
    }, options.progressEveryMs ?? 5000);
    await Promise.all(
      Array.from({ length: options.agents }, async (_, index) => {
        const id = `load-${index}`;
        const history: Array<[string, number, number]> = [];
        const digestOf = (entries: Array<[string, number, number]>) => {
          const bytes = Buffer.concat(entries.map(([agentId, turn, tokens]) => syntheticKv(agentId, turn, tokens, BYTES_PER_TOKEN)));
          return digestOfBytes(bytes, BYTES_PER_TOKEN, TINY.tokensPerBlock).value;
        };
        const agent = await client.start({ agentId: id, tenant: `tenant-${index % 4}`, model: TINY, config: CONFIG });
        agentsStarted++;
        for (let turn = 0; turn < options.turns; turn++) {
          const tokens = options.tokens + (index % 7);
          await agent.turn(tokens);
          history.push([id, turn, tokens]);
          turns++;
        }
        if (options.forkEvery > 0 && index % options.forkEvery === 0) {
          const { child } = await agent.fork(`${id}-fork`);
          await child.turn(5);
          turns++;
          forks++;
          if ((await child.status()).digest !== digestOf([...history, [`${id}-fork`, 0, 5]])) mismatches++;
          await child.release();
        }
        await agent.suspend('disk');
        const before = performance.now();
        const resumed = await agent.resume();
        resumeMs.push(performance.now() - before);
        if (resumed.lastResume) verified++;
        if (resumed.digest !== digestOf(history)) mismatches++;
        await agent.turn(3);
        turns++;
        if ((await agent.status()).digest !== digestOf([...history, [id, options.turns, 3]])) mismatches++;
        await agent.release();
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    clearInterval(progress);

    for (const worker of workers) worker.child.kill('SIGTERM');
    await Promise.all(workers.map((worker) => worker.exited));
    const drainedContexts = workers.map((worker) =>
      Number(/kvfabric GPU worker drained.*?contexts: (\d+)/s.exec(worker.output())?.[1] ?? NaN),
    );
    const leftFiles = ['cold', 'grants'].flatMap((dir) => filesUnder(join(tierDir, dir)).map((file) => `${dir}/${file}`));
    const sorted = [...resumeMs].sort((a, b) => a - b);
    const pct = (p: number) => Math.round(sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN);
    return {
      agents: options.agents,
      forks,
      turns,
      seconds: Math.round(seconds * 10) / 10,
      turnsPerSecond: Math.round((turns / seconds) * 10) / 10,
      resumeMs: { p50: pct(50), p95: pct(95), p99: pct(99), max: Math.round(sorted[sorted.length - 1] ?? NaN) },
      verifiedResumes: verified,
      digestMismatches: mismatches,
      drainedContexts,
      leftFiles,
    };
  } finally {
    clearInterval(progress);
    for (const worker of workers) if (worker.child.exitCode === null && worker.child.signalCode === null) worker.child.kill('SIGKILL');
    await agents?.close();
    await server.stop();
    rmSync(tierDir, { recursive: true, force: true });
  }
}

function filesUnder(directory: string): string[] {
  let names: string[];
  try {
    names = readdirSync(directory);
  } catch {
    return [];
  }
  return names.flatMap((name) =>
    statSync(join(directory, name)).isDirectory() ? filesUnder(join(directory, name)).map((f) => `${name}/${f}`) : [name],
  );
}

if (require.main === module) {
  const { values } = parseArgs({
    options: { agents: { type: 'string' }, turns: { type: 'string' }, tokens: { type: 'string' }, 'fork-every': { type: 'string' } },
  });
  runLoad({
    agents: Number(values.agents ?? 200),
    turns: Number(values.turns ?? 3),
    tokens: Number(values.tokens ?? 24),
    forkEvery: Number(values['fork-every'] ?? 5),
    log: (line) => console.log(line),
  }).then(
    (report) => {
      console.log(JSON.stringify(report, null, 2));
      const ok =
        report.digestMismatches === 0 &&
        report.verifiedResumes === report.agents &&
        report.drainedContexts.every((n) => n === 0) &&
        report.leftFiles.length === 0;
      console.log(ok ? 'load: all agents finished, every byte matched, pools and tier directory back to baseline' : 'load: FAILED');
      process.exitCode = ok ? 0 : 1;
    },
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
