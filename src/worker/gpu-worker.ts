// A GPU worker: one allocator pool with its host and disk tiers, polled through two Temporal workers in
// one process, as in Temporal's worker-specific-task-queues sample. The shared queue carries agent
// workflows and placement activities (whoever takes an allocation holds the context); the worker's own
// queue, `${taskQueue}@${workerId}`, carries every later call on the contexts it holds. Shutdown stops
// both, then drains held contexts to the cold tier.
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { NativeConnection, Runtime, Worker } from '@temporalio/worker';

import { createActivities, type ActivityHooks } from '../activities';
import { AgentMemory, CapabilityCheck } from '../agent-memory';
import { EpochStore, GrantStore, HolderFences, TenantRegistry } from '../shared-directory';
import { AuditLog, CapabilityVerifier, CodecKeyRing, dataConverterOf } from '../security';
import { ColdStore, KeyRing } from '../tiers/cold';
import { TieredMemory } from '../tiers/tiered-memory';
import type { Engine } from '../engines/engine';
import { LlamaEngine } from '../engines/llama/llama-engine';
import { bytesPerTokenOf, DEFAULT_TOKENS_PER_BLOCK } from '../fabric/layout';
import type { ModelShape } from '../fabric/types';
import type { AgentModel } from '../workflows/definitions';
import { MODELS, modelNamed } from '../workflows/models';
import { createPool } from './backend';
import type { WorkerConfig } from './config';
import { drainToDisk, type DrainReport } from './drain';
import { WorkerMetrics } from './metrics';
import { startHousekeeping } from './housekeeping';

export interface GpuWorkerOptions {
  config: WorkerConfig;
  /** Reuse a connection (tests run several workers in one process); otherwise one is opened from config. */
  connection?: NativeConnection;
  hooks?: ActivityHooks;
}

export interface GpuWorker {
  /** This worker's own task queue. */
  readonly holder: string;
  readonly memory: AgentMemory;
  /** Polls until shutdown, then drains held contexts to disk and frees everything. */
  run(): Promise<DrainReport>;
  shutdown(): void;
}

export async function createGpuWorker({ config, connection, hooks }: GpuWorkerOptions): Promise<GpuWorker> {
  const logger = Runtime.instance().logger;
  const engine = await openEngine(config);
  const model = poolModel(config, engine);
  const { pool, backend } = createPool({
    shape: model.shape,
    tokensPerBlock: model.tokensPerBlock,
    blockCount: config.deviceBlocks,
    hostBlockCount: config.hostBlocks,
    // With a model engine the engine's own cache is the hot tier (on the GPU with a CUDA build), so the
    // pages live in host memory: no context held twice on the device, no copy a turn does not need
    // (docs/engines.md). The device backend serves engines that read paged KV directly.
    backend: engine ? 'cpu' : config.backend,
    device: config.device,
    ...(config.deviceMemoryFraction !== undefined && !engine ? { deviceMemoryFraction: config.deviceMemoryFraction } : {}),
  });
  const cold = await ColdStore.open({ directory: join(config.tierDir, 'cold'), keyRing: new KeyRing(config.keys, config.activeKeyId) });
  const grants = await GrantStore.open(join(config.tierDir, 'grants'));
  const holder = `${config.taskQueue}@${config.workerId}`;
  const fences = await HolderFences.open(join(config.tierDir, 'fences'), holder);
  const tiers = new TieredMemory({
    pool,
    cold,
    orphanMinAgeMs: config.orphanMinAgeMs,
    mayWriteManifest: (contextId) => fences.stillHolder(contextId),
    onBackgroundError: (what, err) => logger.warn('kvfabric background work failed; retried later', { what, error: String(err) }),
  });
  const metrics = new WorkerMetrics(Runtime.instance().metricMeter, () => tiers.stats());
  // Public keys only: this process can check capabilities but never mint one.
  const capabilities = new CapabilityCheck(
    new CapabilityVerifier(config.trustedKeys),
    await EpochStore.open(join(config.tierDir, 'epochs')),
    new AuditLog(join(config.tierDir, 'audit', `denials-${config.workerId}.jsonl`), config.workerId),
    (action) => metrics.denied(action),
  );
  const tenantIds = await TenantRegistry.open(join(config.tierDir, 'tenants'));
  const memory = new AgentMemory({ tiers, layout: pool.layout, grants, capabilities, cold, observer: metrics, fences, tenantIds, ...(engine ? { engine } : {}) });
  const activities = createActivities({ memory, holder, ...(hooks ? { hooks } : {}) });

  const ownConnection = connection === undefined;
  const conn = connection ?? (await NativeConnection.connect({ address: config.temporal.address, ...(config.temporal.tls ? { tls: config.temporal.tls } : {}) }));
  const common = {
    connection: conn,
    namespace: config.temporal.namespace,
    maxConcurrentActivityTaskExecutions: config.maxConcurrentActivities,
    shutdownGraceTime: config.shutdownGraceMs,
    dataConverter: dataConverterOf(new CodecKeyRing(config.codecKeys, config.activeCodecKeyId)),
  };
  const shared = await Worker.create({
    ...common,
    taskQueue: config.taskQueue,
    activities: activities.placement,
    ...(config.workflows ? { workflowsPath: workflowsPath() } : {}),
  });
  const own = await Worker.create({ ...common, taskQueue: holder, activities: activities.context });
  function stopAll(): void {
    for (const worker of [shared, own]) {
      if (worker.getState() === 'RUNNING') worker.shutdown();
    }
  }

  logger.info('kvfabric GPU worker ready', {
    holder,
    backend,
    model: model.name,
    engine: engine ? `${engine.fingerprint.engine} ${engine.fingerprint.version}` : 'synthetic',
    deviceBlocks: config.deviceBlocks,
    hostBlocks: config.hostBlocks,
    workflows: config.workflows,
  });

  return {
    holder,
    memory,
    async run(): Promise<DrainReport> {
      metrics.start();
      const housekeeping = startHousekeeping(memory, {
        intervalMs: config.housekeepingMs,
        orphanMinAgeMs: config.orphanMinAgeMs,
        log: (message, meta) => logger.info(message, { holder, ...meta }),
      });
      // If either poller fails, the other stops too: half a GPU worker would hold contexts nobody can reach.
      const outcomes = await Promise.allSettled([shared, own].map((worker) => worker.run().finally(stopAll)));
      metrics.stop();
      await housekeeping.stop();
      const report = await drainToDisk(memory);
      logger.info('kvfabric GPU worker drained', { holder, contexts: report.contexts, bytes: report.bytes, failed: report.failed.length });
      await cold.close();
      await engine?.close();
      pool.close();
      if (ownConnection) await conn.close();
      const failure = outcomes.find((outcome) => outcome.status === 'rejected');
      if (failure) throw failure.reason;
      return report;
    },
    shutdown: stopAll,
  };
}

/** The engine behind message turns: none for the synthetic engine (its turns are token counts). */
async function openEngine(config: WorkerConfig): Promise<Engine | undefined> {
  if (config.engine === 'synthetic') return undefined;
  return LlamaEngine.open({
    ...(config.modelFile ? { modelFile: config.modelFile } : {}),
    contextLength: config.contextLength,
    // A CUDA pool's worker runs the model on the GPU too (node-llama-cpp's CUDA build; unverified here).
    ...(config.backend === 'cuda' ? { gpu: 'cuda' as const } : {}),
  });
}

/** The pool's shape: --model, which must then be the engine's, or the engine's own. */
function poolModel(config: WorkerConfig, engine: Engine | undefined): AgentModel {
  if (!engine) return config.model ?? modelNamed('llama-3-8b');
  const { shape } = engine.fingerprint;
  const named = config.model;
  if (named && bytesPerTokenOf(named.shape) !== bytesPerTokenOf(shape)) {
    throw new Error(`--model ${named.name} (${bytesPerTokenOf(named.shape)} bytes per token) does not match the model file (${bytesPerTokenOf(shape)})`);
  }
  return named ?? { name: modelNameOf(shape), shape, tokensPerBlock: DEFAULT_TOKENS_PER_BLOCK };
}

/** The catalog's name for a shape (so clients can name it), else LxHxDxB. */
function modelNameOf(shape: ModelShape): string {
  const known = Object.values(MODELS).find((m) => bytesPerTokenOf(m.shape) === bytesPerTokenOf(shape) && m.shape.layers === shape.layers);
  return known?.name ?? `${shape.layers}x${shape.kvHeads}x${shape.headDim}x${shape.dtypeBytes}`;
}

/** The workflow bundle's entry, from TypeScript sources (tsx, vitest) or compiled JavaScript (dist). */
export function workflowsPath(): string {
  const base = join(__dirname, '..', 'workflows', 'index');
  const found = ['.ts', '.js'].map((ext) => base + ext).find((path) => existsSync(path));
  if (!found) throw new Error(`workflow sources not found at ${base}.ts or .js`);
  return found;
}
