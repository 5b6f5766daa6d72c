// The GPU worker's configuration, from flags first and environment variables second. Master keys come
// only from the environment or a key file, never from flags (flags show in `ps`).
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';

import { DEFAULT_MAX_CAPABILITY_LIFETIME_S } from '../security/capability-verifier';
import { keyListFromEnv, parseKeyList } from '../security/key-list';
import { readProtectedFile } from '../security/protected-file';
import { TEMPORAL_FLAG_OPTIONS, temporalSettingsFromFlags, type TemporalSettings } from '../client/temporal-settings';
import { wholeNumber } from '../client/whole-number';
import type { KvFabricWorkerOptions, MasterKeySetting } from '../plugin/worker-options';
import { tierLocationOf } from '../plugin/tier-location';
import { STALE_TEMP_AGE_MS } from '../blob-store/posix/temp-files';
import { DEFAULT_PREFIX_IDLE_MS } from '../prefix-sharing/prefix-sharing';
import type { TenantQuotaShares } from '../tiers/tenant-quotas';
import { modelNamed } from '../engines/models';
import { engineNamed } from '../engines/registry';
import { checkWorkerId } from '../identity/worker-id';
import { asWorkerConfigError } from './config-error';
import { LOG_FORMATS, isLogFormat, type LogFormat } from './log-format';

export type { Backend } from '../fabric/types';
export type { EngineKind, MasterKeySetting } from '../plugin/worker-options';

/**
 * The kvfabric worker plugin's options and the worker process's own: connection, queue, tuning.
 * @experimental
 */
export interface WorkerConfig extends KvFabricWorkerOptions {
  temporal: TemporalSettings;
  /** The shared queue: agent workflows and placement activities. */
  taskQueue: string;
  /** Whether this worker also runs agent workflows (GPU workers may leave them to others). */
  workflows: boolean;
  /** host:port of the Prometheus endpoint (SDK and kvfabric metrics); none when absent. */
  metricsAddress?: string;
  maxConcurrentActivities: number;
  /** How long shutdown waits for running activities before the drain. */
  shutdownGraceMs: number;
  /** The worker process's log lines (main.ts): text (default) or one JSON object per line. */
  logFormat?: LogFormat;
}

export const WORKER_USAGE = `Usage: kvfabric-worker [options]

Temporal:   --profile name (TEMPORAL_PROFILE): a profile of temporal.toml (TEMPORAL_CONFIG_FILE), then
            Temporal's environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS*),
            then these flags: --address host:port (default localhost:7233), --namespace name (default
            "default"), --tls, --tls-cert file, --tls-key file, --tls-ca file, --tls-server-name name
Placement:  --task-queue name (KVFABRIC_TASK_QUEUE, default "kvfabric")
            --worker-id id (KVFABRIC_WORKER_ID, default host-pid-random; letters, digits, . _ -)
            --no-workflows      run memory activities only
Pool:       --backend auto|cpu|cuda (KVFABRIC_BACKEND, default auto), --device n (KVFABRIC_DEVICE, default 0)
            --device-memory-fraction f (KVFABRIC_DEVICE_MEMORY_FRACTION; CUDA: device tier = f x free memory)
            --device-blocks n (KVFABRIC_DEVICE_BLOCKS, default 1024)
            --host-blocks n (KVFABRIC_HOST_BLOCKS, default 4096)
            --tenant-device-share f (KVFABRIC_TENANT_DEVICE_SHARE, default 0.75), --tenant-host-share f
              (KVFABRIC_TENANT_HOST_SHARE, default 0.75), --tenant-pinned-share f (KVFABRIC_TENANT_PINNED_SHARE,
              default 0.5, of the device blocks): the most of each any one tenant holds; past it, RESOURCE_EXHAUSTED
Tier:       --tier-dir path (KVFABRIC_TIER_DIR): the directory all workers share, or
            --tier-url file:///path|s3://bucket/prefix (KVFABRIC_TIER_URL): one of the two is required; with
              s3://, workers on many machines share only the bucket (credentials: the AWS SDK's chain only)
            --s3-endpoint url (KVFABRIC_S3_ENDPOINT, default AWS), --s3-region r (KVFABRIC_S3_REGION, default
              the SDK's AWS_REGION or profile), --s3-path-style (KVFABRIC_S3_PATH_STYLE=1): most non-AWS servers
            --scratch-dir path (KVFABRIC_SCRATCH_DIR; default the tier directory, required with s3://): this
              worker's own local files (its audit log)
Engine:     --engine llama|synthetic|registered name (KVFABRIC_ENGINE, default llama): a model, or stand-in KV
              for tests (docs/engines.md#adding-an-engine)
            --model-file path.gguf (KVFABRIC_MODEL_FILE, default the cached SmolLM2-135M-Instruct)
            --context-length n (KVFABRIC_CONTEXT_LENGTH, default 4096): tokens per agent context
            --engine-batch-size n (KVFABRIC_ENGINE_BATCH_SIZE, default llama.cpp's): tokens a pass; under 64
              a continued context's KV is bit for bit a whole evaluation's (docs/ai-sdk.md#identical-replies)
            --model smollm2-135m|llama-3-8b|tiny|LxHxDxB[/T] (KVFABRIC_MODEL): the pool's shape; default the
              model file's (llama), llama-3-8b (synthetic)
Keys:       KVFABRIC_KEYS="id=base64[,id=base64...]" or --key-file file (KVFABRIC_KEY_FILE; one id=base64 per line)
            --active-key id (KVFABRIC_ACTIVE_KEY, default the first key)
            KVFABRIC_TRUSTED_KEYS="kid=base64 Ed25519 public key[,...]" (or KVFABRIC_TRUSTED_KEYS_FILE)
            KVFABRIC_CODEC_KEYS="id=base64 AES-256 key[,...]" (or KVFABRIC_CODEC_KEYS_FILE),
            KVFABRIC_CODEC_ACTIVE_KEY (default the first)
            --max-capability-lifetime s (KVFABRIC_MAX_CAPABILITY_LIFETIME_S, default 604800): capabilities
              living longer, or expiring further ahead, are refused
Chores:     --housekeeping-ms n (default 600000; 0: at start only): how often segment files no manifest
            names (left by killed workers) are deleted and copies of contexts adopted elsewhere dropped
            --orphan-min-age-ms n (default ${STALE_TEMP_AGE_MS}): how old such a segment file must be
            --prefix-idle-ms n (default ${DEFAULT_PREFIX_IDLE_MS}; 0: at once): how long a shared prefix no
              agent refers to stays, in memory and in the cold tier
Operations: --log-format text|json (KVFABRIC_LOG_FORMAT, default text): json writes one object per line,
            {"ts", "level", "msg", "fields"}
            --metrics host:port (KVFABRIC_METRICS), --max-concurrent-activities n (default 8): calls
              running at once on each queue (the worker's own queue takes more, queued inside)
            --shutdown-grace-ms n (default 30000): SIGTERM/SIGINT lets running calls finish this long,
              then drains held contexts to --tier-dir
            -h, --help          this text`;

/** Every flag kvfabric-worker takes: WORKER_USAGE names each one (test/worker/config.test.ts holds them equal). */
export const WORKER_FLAGS = {
  ...TEMPORAL_FLAG_OPTIONS,
  'task-queue': { type: 'string' },
  'worker-id': { type: 'string' },
  'no-workflows': { type: 'boolean' },
  backend: { type: 'string' },
  device: { type: 'string' },
  'device-memory-fraction': { type: 'string' },
  engine: { type: 'string' },
  'model-file': { type: 'string' },
  'context-length': { type: 'string' },
  'engine-batch-size': { type: 'string' },
  model: { type: 'string' },
  'device-blocks': { type: 'string' },
  'host-blocks': { type: 'string' },
  'tenant-device-share': { type: 'string' },
  'tenant-host-share': { type: 'string' },
  'tenant-pinned-share': { type: 'string' },
  'tier-dir': { type: 'string' },
  'tier-url': { type: 'string' },
  's3-endpoint': { type: 'string' },
  's3-region': { type: 'string' },
  's3-path-style': { type: 'boolean' },
  'scratch-dir': { type: 'string' },
  'key-file': { type: 'string' },
  'active-key': { type: 'string' },
  metrics: { type: 'string' },
  'max-concurrent-activities': { type: 'string' },
  'shutdown-grace-ms': { type: 'string' },
  'housekeeping-ms': { type: 'string' },
  'orphan-min-age-ms': { type: 'string' },
  'prefix-idle-ms': { type: 'string' },
  'log-format': { type: 'string' },
  'max-capability-lifetime': { type: 'string' },
} as const;

/** The worker's settings from flags and environment; a bad one throws a WorkerConfigError naming it, in one line. */
export function parseWorkerConfig(argv: string[], env: NodeJS.ProcessEnv = process.env): WorkerConfig {
  try {
    return readWorkerConfig(argv, env);
  } catch (err) {
    throw asWorkerConfigError(err);
  }
}

function readWorkerConfig(argv: string[], env: NodeJS.ProcessEnv): WorkerConfig {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: WORKER_FLAGS,
  });
  const logFormat = values['log-format'] ?? env.KVFABRIC_LOG_FORMAT ?? 'text';
  if (!isLogFormat(logFormat)) throw new Error(`--log-format must be ${LOG_FORMATS.join(' or ')}, got '${logFormat}'`);
  const backend = values.backend ?? env.KVFABRIC_BACKEND ?? 'auto';
  if (backend !== 'auto' && backend !== 'cpu' && backend !== 'cuda')
    throw new Error(`--backend must be auto, cpu or cuda, got '${backend}'`);
  const tier = tierSettings(values, env);
  const keyFile =
    values['key-file'] !== undefined
      ? { path: values['key-file'], setting: '--key-file' }
      : env.KVFABRIC_KEY_FILE
        ? { path: env.KVFABRIC_KEY_FILE, setting: 'KVFABRIC_KEY_FILE' }
        : undefined;
  const keys = parseKeys(env.KVFABRIC_KEYS, keyFile);
  const activeKeyId = values['active-key'] ?? env.KVFABRIC_ACTIVE_KEY ?? keys[0]!.id;
  if (!keys.some((k) => k.id === activeKeyId)) throw new Error(`active key '${activeKeyId}' is not among the keys given`);
  // Public keys, but whoever could change the file could add a key of their own: refused if others can write it.
  const trustedKeys = keyListFromEnv(env, 'KVFABRIC_TRUSTED_KEYS', 'public');
  if (!trustedKeys) throw new Error('no capability key: set KVFABRIC_TRUSTED_KEYS="kid=base64 Ed25519 public key"');
  const codecKeys = keyListFromEnv(env, 'KVFABRIC_CODEC_KEYS');
  if (!codecKeys) throw new Error('no payload codec key: set KVFABRIC_CODEC_KEYS="id=base64key"');
  const activeCodecKeyId = env.KVFABRIC_CODEC_ACTIVE_KEY ?? codecKeys[0]!.id;
  const metricsAddress = values.metrics ?? env.KVFABRIC_METRICS;
  const engine = values.engine ?? env.KVFABRIC_ENGINE ?? 'llama';
  engineNamed(engine); // a name the registry knows
  const modelName = values.model ?? env.KVFABRIC_MODEL;
  const modelFile = values['model-file'] ?? env.KVFABRIC_MODEL_FILE;
  return {
    temporal: temporalSettingsFromFlags(values, env),
    taskQueue: values['task-queue'] ?? env.KVFABRIC_TASK_QUEUE ?? 'kvfabric',
    workerId: workerIdOf(values['worker-id'], env.KVFABRIC_WORKER_ID),
    workflows: !values['no-workflows'],
    ...tier,
    pool: {
      backend,
      device: wholeNumber(values.device ?? env.KVFABRIC_DEVICE ?? '0', '--device', 0),
      ...fraction(values['device-memory-fraction'] ?? env.KVFABRIC_DEVICE_MEMORY_FRACTION),
      deviceBlocks: wholeNumber(values['device-blocks'] ?? env.KVFABRIC_DEVICE_BLOCKS ?? '1024', '--device-blocks'),
      hostBlocks: wholeNumber(values['host-blocks'] ?? env.KVFABRIC_HOST_BLOCKS ?? '4096', '--host-blocks', 0),
      ...tenantQuotas(values, env),
    },
    engine: {
      name: engine,
      ...(modelFile ? { modelFile } : {}),
      contextLength: wholeNumber(values['context-length'] ?? env.KVFABRIC_CONTEXT_LENGTH ?? '4096', '--context-length'),
      ...engineBatchSize(values['engine-batch-size'] ?? env.KVFABRIC_ENGINE_BATCH_SIZE),
      ...(modelName ? { model: modelNamed(modelName) } : {}),
    },
    keys: {
      master: keys,
      activeMasterKeyId: activeKeyId,
      trusted: trustedKeys,
      maxCapabilityLifetimeS: wholeNumber(
        values['max-capability-lifetime'] ?? env.KVFABRIC_MAX_CAPABILITY_LIFETIME_S ?? String(DEFAULT_MAX_CAPABILITY_LIFETIME_S),
        '--max-capability-lifetime',
      ),
      codec: codecKeys,
      activeCodecKeyId,
    },
    chores: {
      housekeepingMs: wholeNumber(values['housekeeping-ms'] ?? '600000', '--housekeeping-ms', 0),
      orphanMinAgeMs: wholeNumber(values['orphan-min-age-ms'] ?? String(STALE_TEMP_AGE_MS), '--orphan-min-age-ms', 0),
      ...(values['prefix-idle-ms'] === undefined ? {} : { prefixIdleMs: wholeNumber(values['prefix-idle-ms'], '--prefix-idle-ms', 0) }),
    },
    ...(metricsAddress ? { metricsAddress } : {}),
    maxConcurrentActivities: wholeNumber(values['max-concurrent-activities'] ?? '8', '--max-concurrent-activities'),
    shutdownGraceMs: wholeNumber(values['shutdown-grace-ms'] ?? '30000', '--shutdown-grace-ms', 0),
    logFormat,
  };
}

/** --tier-dir or --tier-url (a flag over either variable), the S3 server's settings, --scratch-dir; checked as the plugin checks them. */
function tierSettings(
  values: { [flag in 'tier-dir' | 'tier-url' | 's3-endpoint' | 's3-region' | 'scratch-dir']?: string } & { 's3-path-style'?: boolean },
  env: NodeJS.ProcessEnv,
): Pick<WorkerConfig, 'tierDir' | 'tierUrl' | 's3' | 'scratchDir'> {
  const flagged = values['tier-dir'] !== undefined || values['tier-url'] !== undefined;
  const tierDir = values['tier-dir'] ?? (flagged ? undefined : env.KVFABRIC_TIER_DIR || undefined);
  const tierUrl = values['tier-url'] ?? (flagged ? undefined : env.KVFABRIC_TIER_URL || undefined);
  if (tierDir === undefined && tierUrl === undefined) {
    throw new Error(
      '--tier-dir (or KVFABRIC_TIER_DIR) is required, or --tier-url (KVFABRIC_TIER_URL): where all workers share the cold tier and records',
    );
  }
  if (tierDir !== undefined && tierUrl !== undefined) throw new Error('--tier-dir and --tier-url name the same thing: give one');
  const scratchDir = values['scratch-dir'] ?? (env.KVFABRIC_SCRATCH_DIR || undefined);
  const endpoint = values['s3-endpoint'] ?? (env.KVFABRIC_S3_ENDPOINT || undefined);
  const region = values['s3-region'] ?? (env.KVFABRIC_S3_REGION || undefined);
  const pathStyle = values['s3-path-style'] ?? (env.KVFABRIC_S3_PATH_STYLE ? env.KVFABRIC_S3_PATH_STYLE === '1' : undefined);
  const s3 = {
    ...(endpoint !== undefined ? { endpoint } : {}),
    ...(region !== undefined ? { region } : {}),
    ...(pathStyle !== undefined ? { forcePathStyle: pathStyle } : {}),
  };
  const settings = {
    ...(tierDir !== undefined ? { tierDir } : { tierUrl }),
    ...(Object.keys(s3).length > 0 ? { s3 } : {}),
    ...(scratchDir !== undefined ? { scratchDir } : {}),
  };
  tierLocationOf(settings); // s3:// without --scratch-dir, or a URL of another kind, stops the worker here
  if (Object.keys(s3).length > 0 && !tierUrl?.startsWith('s3://')) throw new Error('--s3-* settings go with an s3:// --tier-url');
  return settings;
}

function parseKeys(inline: string | undefined, file: { path: string; setting: string } | undefined): MasterKeySetting[] {
  const source = inline ?? (file ? readProtectedFile(file.path, file.setting, 'secret') : undefined);
  if (!source) throw new Error('no master key: set KVFABRIC_KEYS="id=base64key" or --key-file');
  return parseKeyList(source, 'master keys (KVFABRIC_KEYS)');
}

/** --worker-id, else KVFABRIC_WORKER_ID, else host-pid-random (the host name cut to the worker id's alphabet). */
function workerIdOf(flag: string | undefined, variable: string | undefined): string {
  const [given, setting] = flag !== undefined ? [flag, '--worker-id'] : [variable, 'KVFABRIC_WORKER_ID'];
  if (given !== undefined) {
    checkWorkerId(given, setting);
    return given;
  }
  const host =
    hostname()
      .replace(/[^A-Za-z0-9._-]/g, '-')
      .replace(/^[^A-Za-z0-9]+/, '')
      .slice(0, 64) || 'worker';
  return `${host}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/** --tenant-*-share: only those given (TieredMemory fills in the defaults), each in (0, 1]. */
function tenantQuotas(values: Record<string, unknown>, env: NodeJS.ProcessEnv): { quotas?: Partial<TenantQuotaShares> } {
  const quotas: Partial<TenantQuotaShares> = {};
  for (const quota of ['device', 'host', 'pinned'] as const) {
    const flag = `tenant-${quota}-share`;
    const text = (values[flag] as string | undefined) ?? env[`KVFABRIC_TENANT_${quota.toUpperCase()}_SHARE`];
    if (text === undefined) continue;
    const share = Number(text);
    if (!(share > 0 && share <= 1)) throw new Error(`--${flag} must be a number in (0, 1], got '${text}'`);
    quotas[quota] = share;
  }
  return Object.keys(quotas).length > 0 ? { quotas } : {};
}

function fraction(text: string | undefined): { deviceMemoryFraction?: number } {
  if (text === undefined) return {};
  const value = Number(text);
  if (!(value > 0 && value <= 1)) throw new Error(`--device-memory-fraction must be a number in (0, 1], got '${text}'`);
  return { deviceMemoryFraction: value };
}

/** --engine-batch-size: llama.cpp's default when absent. */
function engineBatchSize(text: string | undefined): { batchSize?: number } {
  return text === undefined ? {} : { batchSize: wholeNumber(text, '--engine-batch-size') };
}
