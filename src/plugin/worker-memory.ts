// Everything one kvfabric worker holds in memory, opened together and closed together: the engine, the
// allocator pool with its host and disk tiers, the shared directory's stores, the capability check, the
// metrics, and the activities over them. The worker plugin opens one per worker it is added to.
import { join } from 'node:path';

import { Runtime } from '@temporalio/worker';

import { createActivities } from '../activities';
import { CarriedReplyIds } from '../ai-sdk/carried-reply-ids';
import { ModelCallMemory } from '../ai-sdk/model-call-memory';
import type { HolderActivities, LocalActivities, PlacementActivities } from '../activities/types';
import { AgentMemory, CapabilityCheck } from '../agent-memory';
import type { NamedTenantBlocks } from '../agent-memory/agent-memory';
import { checkWorkerId } from '../identity/worker-id';
import { TenantSalts } from '../prefix-sharing/prefix-keys';
import type { BlobStore } from '../blob-store';
import { EpochStore, GrantStore, HolderFences, RecordSeal, TenantRegistry } from '../shared-directory';
import { AuditLog, CapabilityVerifier } from '../security';
import { ColdStore, KeyRing } from '../tiers/cold';
import { TieredMemory } from '../tiers/tiered-memory';
import type { Engine } from '../engines/engine';
import { engineNamed } from '../engines/registry';
import { bytesPerTokenOf, DEFAULT_TOKENS_PER_BLOCK } from '../fabric/layout';
import type { NativeAllocator } from '../fabric/native-allocator';
import type { BackendInfo, ModelShape } from '../fabric/types';
import { DEFAULT_AGENT_CONFIG, type AgentModel } from '../workflows/definitions';
import { MODELS } from '../engines/models';
import { activityHooksOf } from './activity-hooks';
import { openSharedStore, tierLocationOf } from './tier-location';
import { createPool } from './backend';
import { WorkerMetrics } from './metrics';
import type { KvFabricWorkerOptions } from './worker-options';

export interface WorkerMemory {
  readonly memory: AgentMemory;
  readonly activities: { placement: PlacementActivities; holder: HolderActivities; local: LocalActivities };
  readonly metrics: WorkerMetrics;
  readonly model: AgentModel;
  readonly backend: BackendInfo;
  readonly engine: Engine;
  /** AI SDK agents' KV (the model provider's calls). */
  readonly modelCalls: ModelCallMemory;
  /** Closes the cold tier, the engine and the pool; held contexts must have been drained first. */
  close(): Promise<void>;
}

/** Opens a worker's memory; `holder` is its worker-specific task queue; `runsWorkflows`: it runs agent workflows too. */
export async function openWorkerMemory(options: KvFabricWorkerOptions, holder: string, runsWorkflows: boolean): Promise<WorkerMemory> {
  // It names the audit file below: a path in it would put that file, and the folder's mode, elsewhere.
  checkWorkerId(options.workerId, 'workerId');
  const tier = tierLocationOf(options);
  const logger = Runtime.instance().logger;
  const { pool: poolOptions, keys, chores } = options;
  const engine = await openEngine(options);
  // What has opened so far, released if a later step fails: a loaded model and a pool are large.
  let openedPool: NativeAllocator | undefined;
  let openedCold: ColdStore | undefined;
  let openedShared: BlobStore | undefined;
  try {
    const model = poolModel(options, engine);
    const { pool, backend } = createPool({
      shape: model.shape,
      tokensPerBlock: model.tokensPerBlock,
      blockCount: poolOptions.deviceBlocks,
      hostBlockCount: poolOptions.hostBlocks,
      // An engine whose own cache is the hot tier (llama.cpp's, on the GPU with a CUDA build) has its pages
      // in host memory: no context held twice on the device, no copy a turn does not need (docs/engines.md).
      backend: engine.needs.hostPool ? 'cpu' : poolOptions.backend,
      device: poolOptions.device,
      ...(poolOptions.deviceMemoryFraction !== undefined && !engine.needs.hostPool
        ? { deviceMemoryFraction: poolOptions.deviceMemoryFraction }
        : {}),
    });
    openedPool = pool;
    const keyRing = new KeyRing(keys.master, keys.activeMasterKeyId);
    // The shared tier (tier-location.ts); the record stores below (grants, fences, epochs, tenant ids) use it too.
    const sharedStore = await openSharedStore(tier, options.s3);
    openedShared = sharedStore;
    // A directory's cold tier keeps its own files there (O_DIRECT); a bucket's goes through the store.
    const cold = await ColdStore.open(
      tier.directory !== undefined ? { directory: join(tier.directory, 'cold'), keyRing } : { store: sharedStore, keyRing },
    );
    openedCold = cold;
    const audit = new AuditLog(join(tier.scratchDir, 'audit', `denials-${options.workerId}.jsonl`), options.workerId);
    await audit.open(); // a folder it must refuse stops the worker now, not each denial's line later
    // Grants, epochs, fences and tenant ids are sealed with the master keys; one that is not is audited.
    const records = new RecordSeal(keyRing, audit);
    const grants = await GrantStore.open(sharedStore, 'grants/', records);
    const fences = await HolderFences.open(sharedStore, 'fences/', holder, records);
    const tiers = new TieredMemory({
      pool,
      cold,
      orphanMinAgeMs: chores.orphanMinAgeMs,
      mayWriteManifest: (contextId) => fences.stillHolder(contextId),
      quotas: poolOptions.quotas ?? {}, // the defaults where not given: a worker always has tenant quotas
      onBackgroundError: (what, err) => logger.warn('kvfabric background work failed; retried later', { what, error: String(err) }),
    });
    // Per-tenant gauges name tenants as the agent memory knows them (sampled only once metrics start, after it exists).
    const metrics = new WorkerMetrics(
      Runtime.instance().metricMeter,
      () => tiers.stats(),
      (): NamedTenantBlocks[] => memory.tenantBlocks(),
    );
    // Public keys only: this process can check capabilities but never mint one.
    const capabilities = new CapabilityCheck(
      new CapabilityVerifier(keys.trusted, keys.maxCapabilityLifetimeS === undefined ? {} : { maxLifetimeS: keys.maxCapabilityLifetimeS }),
      await EpochStore.open(sharedStore, 'epochs/', records),
      audit,
      (action) => metrics.denied(action),
    );
    const tenantIds = await TenantRegistry.open(sharedStore, 'tenants/', records);
    const memory = new AgentMemory({
      tiers,
      layout: pool.layout,
      modelName: model.name,
      grants,
      capabilities,
      cold,
      observer: metrics,
      fences,
      tenantIds,
      engine,
      onBackgroundError: (what, err) => logger.warn('kvfabric background work failed', { what, error: String(err) }),
      prefixSalts: new TenantSalts(keyRing),
      ...(chores.prefixIdleMs === undefined ? {} : { prefixIdleMs: chores.prefixIdleMs }),
      ...(chores.prefixesInColdTier === false ? { prefixesInColdTier: false } : {}),
    });
    const hooks = activityHooksOf(options);
    const activities = createActivities({ memory, holder, runsWorkflows, ...(hooks ? { hooks } : {}) });
    const modelCalls = new ModelCallMemory({
      tiers,
      cold,
      engine,
      tenantIds,
      carriedReplies: new CarriedReplyIds(keyRing),
      // The agents' prefix index: a run's first call takes its tenant's shared prefixes, as an agent's first turn does.
      ...(memory.prefixSharing ? { prefixes: memory.prefixSharing } : {}),
      idle: chores.modelCallIdle ?? {
        toHostMs: DEFAULT_AGENT_CONFIG.timers.idleToWarmMs,
        toDiskMs: DEFAULT_AGENT_CONFIG.timers.warmToColdMs,
      },
      onBackgroundError: (what, err) => logger.warn('kvfabric background work failed', { what, error: String(err) }),
    });
    return {
      memory,
      activities,
      metrics,
      model,
      backend,
      engine,
      modelCalls,
      async close() {
        await memory.settled();
        await modelCalls.settled();
        await memory.prefixSharing?.close();
        await cold.close();
        await sharedStore.close();
        await engine.close();
        pool.close();
      },
    };
  } catch (err) {
    await openedCold?.close().catch(() => undefined);
    await openedShared?.close().catch(() => undefined);
    openedPool?.close();
    await engine.close().catch(() => undefined);
    throw err;
  }
}

/** The engine the options name, opened from the registry (src/engines/registry.ts). */
function openEngine({ engine, pool }: KvFabricWorkerOptions): Promise<Engine> {
  return engineNamed(engine.name)({
    ...(engine.model ? { model: engine.model } : {}),
    ...(engine.modelFile ? { modelFile: engine.modelFile } : {}),
    contextLength: engine.contextLength,
    ...(engine.batchSize === undefined ? {} : { batchSize: engine.batchSize }),
    backend: pool.backend,
  });
}

/** The pool's shape: --model, which must then be the engine's, or the engine's own. */
function poolModel(options: KvFabricWorkerOptions, engine: Engine): AgentModel {
  const { shape } = engine.fingerprint;
  const named = options.engine.model;
  if (named && bytesPerTokenOf(named.shape) !== bytesPerTokenOf(shape)) {
    throw new Error(
      `--model ${named.name} (${bytesPerTokenOf(named.shape)} bytes per token) does not match the model file (${bytesPerTokenOf(shape)})`,
    );
  }
  return named ?? { name: modelNameOf(shape), shape, tokensPerBlock: DEFAULT_TOKENS_PER_BLOCK };
}

/** The catalog's name for a shape (so clients can name it), else LxHxDxB. */
function modelNameOf(shape: ModelShape): string {
  const same = (m: AgentModel) =>
    (['layers', 'kvHeads', 'headDim', 'dtypeBytes'] as const).every((field) => m.shape[field] === shape[field]);
  const known = Object.values(MODELS).find(same);
  return known?.name ?? `${shape.layers}x${shape.kvHeads}x${shape.headDim}x${shape.dtypeBytes}`;
}
