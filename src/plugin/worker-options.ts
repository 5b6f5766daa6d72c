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
  /**
   * The directory every worker shares: the cold tier (`cold/`), grants (`grants/`) and the other shared
   * records. The short form of a file:// `tierUrl`; give one of the two.
   */
  tierDir?: string;
  /**
   * The shared tier as a URL: `file:///path` (as tierDir) or `s3://bucket/prefix` for workers on many
   * machines that share nothing but the bucket (`s3` says which server; docs/cold-tier.md#blob-stores).
   */
  tierUrl?: string;
  /** The S3 server of an s3:// tierUrl. Credentials come only from the AWS SDK's chain (environment, profile, role). */
  s3?: WorkerS3Settings;
  /**
   * A local directory for what is this worker's alone (its audit log, `audit/`). Default: tierDir (or a
   * file:// tierUrl's directory); required with an s3:// tierUrl, whose bucket holds only shared state.
   */
  scratchDir?: string;
  pool: WorkerPoolOptions;
  engine: WorkerEngineOptions;
  keys: WorkerKeys;
  chores: WorkerChores;
}

/**
 * Which S3 server an s3:// tierUrl names a bucket of; all absent: AWS, the region from the SDK's chain.
 * @experimental
 */
export interface WorkerS3Settings {
  /** Another server than AWS's, e.g. http://127.0.0.1:8333. */
  endpoint?: string;
  /** Default: the SDK's chain (AWS_REGION, the profile); us-east-1 with an endpoint and none set. */
  region?: string;
  /** The bucket in the path (endpoint/bucket/key): most servers other than AWS want it. */
  forcePathStyle?: boolean;
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
  /**
   * How long a shared prefix no agent or run refers to stays findable before it is freed, in memory and in
   * the cold tier (docs/tiers.md#prefix-sharing). Default: DEFAULT_PREFIX_IDLE_MS, ten minutes; 0: at once.
   */
  prefixIdleMs?: number;
  /**
   * Shared prefixes written to the cold tier, where other workers and this one after a restart adopt
   * them instead of prefilling (docs/tiers.md#prefix-sharing). Default true.
   */
  prefixesInColdTier?: boolean;
}
