// What the kvfabric worker plugin needs to hold agents' memory, by concern: the pool and its tiers, the
// engine that runs turns, the keys, and the chores' timing; beside them, who the worker is and the
// directory it shares. Connection, task queue and worker tuning are not here: they belong to the worker
// the plugin is added to.
import type { Backend } from '../fabric/types';
import type { RawKey } from '../security/key-list';
import type { TenantQuotaShares } from '../tiers/tenant-quotas';
import type { AgentModel } from '../workflows/definitions';

/**
 * An engine's name in the engine registry (src/engines/registry.ts): `llama`, `synthetic`, or one registered.
 * @experimental
 */
export type EngineKind = string;

/** A master key of the cold tier and the shared records. */
export interface MasterKeySetting {
  id: string;
  key: Buffer;
}

/**
 * The kvfabric worker plugin's options, grouped by concern (`kvfabric-worker -h` lists the same groups).
 * @experimental The groups' fields may still move as engines and storage gain options.
 */
export interface KvFabricWorkerOptions {
  /** Unique per process start; names this worker's own queue `${taskQueue}@${workerId}`. */
  workerId: string;
  /** Shared by every worker: the cold tier (`cold/`), grants (`grants/`) and the other shared records. */
  tierDir: string;
  pool: WorkerPoolOptions;
  engine: WorkerEngineOptions;
  keys: WorkerKeys;
  chores: WorkerChores;
}

/**
 * The allocator pool: its backend, the device and host tiers' sizes, and each tenant's share of them.
 * @experimental
 */
export interface WorkerPoolOptions {
  backend: Backend;
  /** CUDA device index. */
  device: number;
  /** CUDA: size the device tier as this fraction of the device's free memory instead of deviceBlocks. */
  deviceMemoryFraction?: number;
  deviceBlocks: number;
  hostBlocks: number;
  /**
   * The most any one tenant may hold on this worker, each a fraction in (0, 1] of its tier: device blocks,
   * host blocks, and pinned blocks (of the device tier). Absent ones: device 0.75, host 0.75, pinned 0.5
   * (src/tiers/tenant-quotas.ts, docs/operations.md#tenant-quotas). Past one, a call is RESOURCE_EXHAUSTED.
   */
  quotas?: Partial<TenantQuotaShares>;
}

/**
 * What runs turns, and the model the pool is shaped for.
 * @experimental
 */
export interface WorkerEngineOptions {
  /**
   * The engine's registry name: `llama` (a GGUF model through node-llama-cpp), `synthetic` (no model, any
   * shape: stand-in KV, token-count turns), or one registered (docs/engines.md#adding-an-engine).
   */
  name: EngineKind;
  /** llama: the GGUF file; absent, the default model that set-up caches (scripts/ensure-model.ts). */
  modelFile?: string;
  /** llama: tokens one agent's context may hold. */
  contextLength: number;
  /**
   * llama: tokens evaluated in one pass (default 512). Under 64, a context's KV does not depend on how its
   * tokens were split into passes, for replies that match a whole re-evaluation bit for bit on one thread;
   * prefill is slower (docs/ai-sdk.md#identical-replies).
   */
  batchSize?: number;
  /** The pool's shape, which an engine without a model file takes (synthetic: default llama-3-8b). Absent: the engine's own. */
  model?: AgentModel;
}

/**
 * The keys: the master keys of the cold tier and records, the capability issuers trusted, the payload codec's.
 * @experimental
 */
export interface WorkerKeys {
  master: MasterKeySetting[];
  activeMasterKeyId: string;
  /** Ed25519 public keys (raw 32 bytes) by key id: the capability issuers this worker trusts. No private key. */
  trusted: RawKey[];
  /** Capabilities living longer than this (seconds), or expiring further ahead, are refused (default 7 days). */
  maxCapabilityLifetimeS?: number;
  /** AES-256 keys of the Temporal payload codec; the active one encodes, every one decodes. */
  codec: RawKey[];
  activeCodecKeyId: string;
}

/**
 * The worker's background chores and their timing.
 * @experimental
 */
export interface WorkerChores {
  /** How often housekeeping runs (orphan segments, fenced contexts: housekeeping.ts); 0: only at start. */
  housekeepingMs: number;
  /** How old such a file must be to go: younger ones may belong to a spill still writing its manifest. */
  orphanMinAgeMs: number;
  /**
   * AI SDK agents' KV (docs/ai-sdk.md): how long it stays in the engine after a call, then in host memory
   * before it goes to disk. Default: the agents' timers (idle to warm, warm to cold).
   */
  modelCallIdle?: { toHostMs: number; toDiskMs: number };
}
