// A Temporal cluster for one test file: the dev server (from the Temporal CLI installed at set-up, never
// downloaded), in-process GPU workers sharing one tier directory, and an AgentClient. Tests use the tiny
// model shape and short timers, so only the bookkeeping costs time.
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';

import { digestOfBytes } from '../../src/agent-memory/context-digest';
import { AgentClient, type AgentConfigOverrides } from '../../src/client/agent-client';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { syntheticKv } from '../../src/engines/synthetic/synthetic-kv';
import { bytesPerTokenOf } from '../../src/fabric/layout';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import type { ActivityHooks } from '../../src/activities';
import { withActivityHooks } from '../../src/plugin/activity-hooks';
import type { WorkerChores, WorkerEngineOptions, WorkerKeys, WorkerPoolOptions } from '../../src/plugin/worker-options';
import type { WorkerConfig } from '../../src/worker/config';
import { createGpuWorker, workflowsPath, type GpuWorker } from '../../src/worker/gpu-worker';
import { MODELS } from '../../src/engines/models';
import { CapabilityIssuer } from '../../src/security/capability-issuer';
import { dataConverterOf } from '../../src/security/data-converter';
import { CodecKeyRing } from '../../src/security/payload-codec';
import { TEST_CODEC_KEYS, TEST_SIGNING_KEYS, TEST_TRUSTED_KEYS, keyListText } from '../security/test-keys';
import { spawnWorkerProcess, type WorkerProcess as SpawnedWorker } from '../../scripts/worker-process';

export const TINY = MODELS.tiny!;

/** The digest an agent's context has after these synthetic turns: [agent id, turn number, tokens] each. */
export function expectedDigest(turns: Array<[agentId: string, turn: number, tokens: number]>): string {
  const bytesPerToken = bytesPerTokenOf(TINY.shape);
  const bytes = Buffer.concat(turns.map(([agentId, turn, tokens]) => syntheticKv(agentId, turn, tokens, bytesPerToken)));
  return digestOfBytes(bytes, bytesPerToken, TINY.tokensPerBlock).value;
}

/** Short enough for tests, long enough that a loaded 2-core machine never trips them by accident. */
export const TEST_AGENT_CONFIG: AgentConfigOverrides = {
  timers: { idleToWarmMs: 10 * 60_000, warmToColdMs: 10 * 60_000 },
  timeouts: { holderLossMs: 4000, attemptMs: 30_000, heartbeatMs: 5000, operationMs: 60_000 },
};

let metricsAddress: string | undefined;

/** The Temporal runtime of this test process (one per process), quiet, with a Prometheus endpoint. */
export async function installRuntime(): Promise<string> {
  if (metricsAddress) return metricsAddress;
  metricsAddress = `127.0.0.1:${await freePort()}`;
  Runtime.install({
    logger: new DefaultLogger('WARN'),
    telemetryOptions: { metrics: { prometheus: { bindAddress: metricsAddress } } },
  });
  return metricsAddress;
}

export interface WorkerProcess extends SpawnedWorker {
  /** Its worker-specific task queue. */
  holder: string;
}

/** The data converter of every test client and worker: payloads sealed with the test codec key. */
export const TEST_DATA_CONVERTER = dataConverterOf(new CodecKeyRing(TEST_CODEC_KEYS));

/** Overrides of a test worker's configuration: whole top-level fields, and single fields of each group. */
export type TestWorkerOverrides = Partial<Omit<WorkerConfig, 'pool' | 'engine' | 'keys' | 'chores'>> & {
  pool?: Partial<WorkerPoolOptions>;
  engine?: Partial<WorkerEngineOptions>;
  keys?: Partial<WorkerKeys>;
  chores?: Partial<WorkerChores>;
};

/**
 * A test worker's whole configuration: the synthetic engine on the tiny shape, the test keys, no
 * housekeeping; `address`, `taskQueue` and `tierDir` say where, anything else may be overridden.
 */
export function testWorkerConfig({
  address,
  pool,
  engine,
  keys,
  chores,
  ...overrides
}: TestWorkerOverrides & { address: string; taskQueue: string; tierDir: string }): WorkerConfig {
  const master = keys?.master ?? [{ id: 'master', key: randomBytes(32) }];
  return {
    temporal: { address, namespace: 'default' },
    workerId: `w-${randomBytes(3).toString('hex')}`,
    workflows: true,
    pool: { backend: 'cpu', device: 0, deviceBlocks: 256, hostBlocks: 256, ...pool },
    engine: { name: 'synthetic', contextLength: 4096, model: TINY, ...engine },
    keys: {
      master,
      activeMasterKeyId: master[0]!.id,
      trusted: TEST_TRUSTED_KEYS,
      codec: TEST_CODEC_KEYS,
      activeCodecKeyId: TEST_CODEC_KEYS[0]!.id,
      ...keys,
    },
    chores: { housekeepingMs: 0, orphanMinAgeMs: 3_600_000, ...chores },
    maxConcurrentActivities: 8,
    shutdownGraceMs: 2000,
    ...overrides,
  };
}

export interface TestCluster {
  server: DevServer;
  agents: AgentClient;
  /** Reads and writes through the payload codec. */
  client: Client;
  /** No codec: sees history as anyone without the codec keys does. */
  rawClient: Client;
  taskQueue: string;
  tierDir: string;
  /** KVFABRIC_KEYS value shared by every worker of the cluster. */
  keys: string;
  metricsAddress: string;
  workers: GpuWorker[];
  runs: Promise<unknown>[];
  startWorker(options?: { hooks?: ActivityHooks; config?: TestWorkerOverrides }): Promise<GpuWorker>;
  /** A worker that runs agent workflows only (no memory), on `taskQueue` (default the cluster's). */
  startWorkflowWorker(taskQueue?: string): Promise<Worker>;
  /** A GPU worker in a child process (src/worker/main.ts), to be killed for real. */
  /** `entry`: a wrapper around the worker's main (a fault-injecting one), instead of main itself. */
  spawnWorker(options: {
    workerId: string;
    taskQueue?: string;
    args?: string[];
    env?: Record<string, string>;
    entry?: string;
  }): Promise<WorkerProcess>;
  workerConfig(overrides?: TestWorkerOverrides): WorkerConfig;
  /**
   * Stops the dev server (SIGTERM: graceful; SIGKILL: at once) and starts it again on the same port and
   * SQLite file. Only for a cluster started with `persistent: true`.
   */
  restartServer(signal: 'SIGTERM' | 'SIGKILL'): Promise<void>;
  close(): Promise<void>;
}

export async function startCluster(
  options: { dynamicConfig?: Record<string, string | number | boolean>; persistent?: boolean } = {},
): Promise<TestCluster> {
  const metrics = await installRuntime();
  const serverDir = options.persistent ? mkdtempSync(join(tmpdir(), 'kvfabric-server-')) : undefined;
  const serverOptions = {
    ...(options.dynamicConfig ? { dynamicConfig: options.dynamicConfig } : {}),
    ...(serverDir ? { dbFile: join(serverDir, 'temporal.db'), port: await freePort() } : {}),
  };
  let server = await startDevServer(serverOptions);
  const tierDir = mkdtempSync(join(tmpdir(), 'kvfabric-test-'));
  const keyId = 'test-key';
  const key = randomBytes(32);
  const keys = `${keyId}=${key.toString('base64')}`;
  const taskQueue = `kvfabric-test-${randomBytes(4).toString('hex')}`;
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection, dataConverter: TEST_DATA_CONVERTER });
  const rawClient = new Client({ connection });
  const agents = new AgentClient(client, taskQueue, { issuer: new CapabilityIssuer(TEST_SIGNING_KEYS) });
  const workerConnection = await NativeConnection.connect({ address: server.address });
  const workers: GpuWorker[] = [];
  const workflowWorkers: Worker[] = [];
  const processes: ChildProcess[] = [];
  const runs: Promise<unknown>[] = [];

  const workerConfig = (overrides: TestWorkerOverrides = {}): WorkerConfig =>
    testWorkerConfig({
      address: server.address,
      taskQueue,
      tierDir,
      workerId: `w${workers.length}-${randomBytes(3).toString('hex')}`,
      ...overrides,
      keys: { master: [{ id: keyId, key }], ...overrides.keys },
    });

  return {
    get server() {
      return server;
    },
    agents,
    client,
    rawClient,
    taskQueue,
    tierDir,
    keys,
    metricsAddress: metrics,
    workers,
    runs,
    workerConfig,
    async startWorker(opts = {}) {
      const worker = await createGpuWorker({
        config: withActivityHooks(workerConfig(opts.config), opts.hooks),
        connection: workerConnection,
      });
      workers.push(worker);
      runs.push(worker.run());
      return worker;
    },
    async startWorkflowWorker(queue = taskQueue) {
      const worker = await Worker.create({
        connection: workerConnection,
        taskQueue: queue,
        workflowsPath: workflowsPath(),
        dataConverter: TEST_DATA_CONVERTER,
      });
      workflowWorkers.push(worker);
      runs.push(worker.run());
      return worker;
    },
    async spawnWorker({ workerId, taskQueue: queue = taskQueue, args = [], env = {}, entry }) {
      const flags = [
        ...['--address', server.address, '--task-queue', queue],
        ...[
          '--engine',
          'synthetic',
          '--model',
          'tiny',
          '--device-blocks',
          '256',
          '--host-blocks',
          '256',
          '--tier-dir',
          tierDir,
          '--shutdown-grace-ms',
          '2000',
        ],
        ...args,
      ];
      const worker = await spawnWorkerProcess(
        workerId,
        flags,
        {
          KVFABRIC_KEYS: keys,
          KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
          KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
          ...env,
        },
        entry,
      );
      processes.push(worker.child);
      return { ...worker, holder: `${queue}@${workerId}` };
    },
    async restartServer(signal) {
      if (!serverDir) throw new Error('restartServer needs a cluster started with persistent: true');
      if (signal === 'SIGKILL') {
        process.kill(server.pid, 'SIGKILL');
        await eventually(async () => (processGone(server.pid) ? true : undefined), 10_000, 'the killed dev server to exit');
      }
      await server.stop();
      server = await startDevServer(serverOptions);
    },
    async close() {
      for (const child of processes) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      for (const worker of workflowWorkers) if (worker.getState() === 'RUNNING') worker.shutdown();
      for (const worker of workers) worker.shutdown();
      await Promise.allSettled(runs);
      await connection.close();
      await workerConnection.close();
      await server.stop();
      rmSync(tierDir, { recursive: true, force: true });
      if (serverDir) rmSync(serverDir, { recursive: true, force: true });
    },
  };
}

function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
}

/** Polls until `check` returns a value (not undefined), or fails after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 20_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Test-only fault injection: fail an activity once, after its side effect was applied and recorded. */
export class FaultPlan {
  private readonly planned = new Set<string>();
  readonly injected: string[] = [];

  failOnceAfter(agentId: string, activity: string): void {
    this.planned.add(`${agentId}/${activity}`);
  }

  readonly hooks: ActivityHooks = {
    afterApplied: (activity, request) => {
      const key = `${request.agentId}/${activity}`;
      if (!this.planned.delete(key)) return;
      this.injected.push(`${key}@${request.operationId}`);
      throw new Error(`injected fault after ${activity} applied operation ${request.operationId}`);
    },
  };
}

/** Writes a workflow run's history as a replay fixture when KVFABRIC_RECORD_HISTORIES names a directory. */
export async function recordHistory(client: Client, name: string, workflowId: string, runId?: string): Promise<void> {
  const directory = process.env.KVFABRIC_RECORD_HISTORIES;
  if (!directory) return;
  const { mkdirSync, writeFileSync } = await import('node:fs');
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  // The proto package's own codec both ways (see replay.test.ts): the SDK's historyToJSON trips over the
  // second protobufjs copy that @temporalio/common carries.
  const json = temporal.api.history.v1.History.toObject(history as temporal.api.history.v1.History, {
    longs: String,
    enums: String,
    bytes: String,
  });
  mkdirSync(directory, { recursive: true });
  writeFileSync(join(directory, `${name}.json`), `${JSON.stringify(json, null, 1)}\n`);
}

/** Every string and byte string in an agent's history, bytes read as Latin-1: plaintext anywhere shows up here. */
export async function everythingIn(client: Client, agentId: string): Promise<string> {
  const history = await client.workflow.getHandle(agentWorkflowId(agentId)).fetchHistory();
  const parts: string[] = [];
  const walk = (value: unknown): void => {
    if (value instanceof Uint8Array) parts.push(Buffer.from(value).toString('latin1'));
    else if (typeof value === 'string') parts.push(value);
    else if (Array.isArray(value)) value.forEach(walk);
    else if (value && typeof value === 'object') Object.values(value).forEach(walk);
  };
  walk(history);
  return parts.join('\n');
}

/** Every payload of an agent's history decoded with the client's codec, as UTF-8 text. */
export async function decodedPayloadsOf(client: Client, agentId: string): Promise<string> {
  const history = await client.workflow.getHandle(agentWorkflowId(agentId)).fetchHistory();
  const codec = client.options.loadedDataConverter.payloadCodecs[0]!;
  const texts: string[] = [];
  const walk = async (value: unknown): Promise<void> => {
    if (!value || typeof value !== 'object' || value instanceof Uint8Array) return;
    const payloads = (value as { payloads?: unknown }).payloads;
    if (Array.isArray(payloads))
      for (const payload of await codec.decode(payloads)) texts.push(Buffer.from(payload.data ?? []).toString('utf8'));
    for (const child of Object.values(value)) await walk(child);
  };
  await walk(history);
  return texts.join('\n');
}
