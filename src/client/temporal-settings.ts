// How a process reaches Temporal, the Temporal way (@temporalio/envconfig): a profile of temporal.toml
// (TEMPORAL_CONFIG_FILE, else ~/.config/temporalio/temporal.toml; TEMPORAL_PROFILE or --profile, else
// "default"), overridden by Temporal's environment variables (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH, ..., TEMPORAL_GRPC_META_*), overridden
// by flags. Shared by the worker, the client and the CLI, which hand the result to NativeConnection and
// Connection alike (connectionOptionsOf). The API key comes from the file or the environment, never a
// flag (flags show in `ps`). A file that cannot be read, or a profile that does not parse, fails naming
// the flag or the variable that led there.
import { existsSync, readFileSync } from 'node:fs';

import type { TLSConfig } from '@temporalio/client';
import { loadClientConnectConfig } from '@temporalio/envconfig';

import { FabricError } from '../fabric/errors';

/** @experimental Follows @temporalio/envconfig, itself experimental. */
export interface TemporalSettings {
  address: string;
  namespace: string;
  /** Absent: plaintext (the dev server). */
  tls?: TLSConfig;
  /** Temporal Cloud's API key (implies TLS). Secret: never print it. */
  apiKey?: string;
  /** gRPC metadata sent with every call. */
  metadata?: Record<string, string>;
  /**
   * How long a client connection waits for the server (the SDK's default: 10 s). Clients only: the
   * worker's native connection fails at once when nothing listens.
   */
  connectTimeoutMs?: number;
}

export interface TemporalFlags {
  address?: string;
  namespace?: string;
  profile?: string;
  tls?: boolean;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
  tlsServerName?: string;
}

/** The connection flags every kvfabric command line takes, in node:util parseArgs form. */
export const TEMPORAL_FLAG_OPTIONS = {
  address: { type: 'string' },
  namespace: { type: 'string' },
  profile: { type: 'string' },
  tls: { type: 'boolean' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'tls-ca': { type: 'string' },
  'tls-server-name': { type: 'string' },
} as const;

interface ParsedTemporalFlags {
  address?: string;
  namespace?: string;
  profile?: string;
  tls?: boolean;
  'tls-cert'?: string;
  'tls-key'?: string;
  'tls-ca'?: string;
  'tls-server-name'?: string;
}

/** Settings from parsed TEMPORAL_FLAG_OPTIONS values, over the profile and the environment. */
export function temporalSettingsFromFlags(values: ParsedTemporalFlags, env: NodeJS.ProcessEnv = process.env): TemporalSettings {
  return temporalSettings(
    {
      address: values.address,
      namespace: values.namespace,
      profile: values.profile,
      tls: values.tls,
      tlsCert: values['tls-cert'],
      tlsKey: values['tls-key'],
      tlsCa: values['tls-ca'],
      tlsServerName: values['tls-server-name'],
    },
    env,
  );
}

export function temporalSettings(flags: TemporalFlags, env: NodeJS.ProcessEnv = process.env): TemporalSettings {
  if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined))
    throw new FabricError('INVALID_ARGUMENT', 'TLS needs both a client certificate and its key (--tls-cert and --tls-key)');
  const { connectionOptions: profile, namespace } = profileOf(flags, env);
  let tls: TLSConfig | undefined = profile.tls === true ? {} : profile.tls || undefined;
  if (flags.tls || flags.tlsCert || flags.tlsCa || flags.tlsServerName) tls = { ...tls };
  if (tls) {
    if (flags.tlsServerName) tls.serverNameOverride = flags.tlsServerName;
    if (flags.tlsCa) tls.serverRootCACertificate = fileOf(flags.tlsCa, '--tls-ca');
    if (flags.tlsCert && flags.tlsKey)
      tls.clientCertPair = { crt: fileOf(flags.tlsCert, '--tls-cert'), key: fileOf(flags.tlsKey, '--tls-key') };
    if (tls.clientCertPair && (!tls.clientCertPair.crt || !tls.clientCertPair.key))
      throw new FabricError('INVALID_ARGUMENT', 'TLS needs both a client certificate and its key');
  }
  const apiKey = typeof profile.apiKey === 'string' ? profile.apiKey : undefined;
  return {
    address: flags.address ?? profile.address ?? 'localhost:7233',
    namespace: flags.namespace ?? namespace ?? 'default',
    ...(tls ? { tls: withoutUndefined(tls) } : {}),
    ...(apiKey ? { apiKey } : {}),
    ...(profile.metadata && Object.keys(profile.metadata).length > 0 ? { metadata: profile.metadata as Record<string, string> } : {}),
  };
}

/** The options Connection.connect and NativeConnection.connect both take. */
export function connectionOptionsOf(settings: TemporalSettings): {
  address: string;
  tls?: TLSConfig;
  apiKey?: string;
  metadata?: Record<string, string>;
} {
  return {
    address: settings.address,
    ...(settings.tls ? { tls: settings.tls } : {}),
    ...(settings.apiKey ? { apiKey: settings.apiKey } : {}),
    ...(settings.metadata ? { metadata: settings.metadata } : {}),
  };
}

/** The profile and Temporal's variables, read by @temporalio/envconfig; its failures (a missing file, bad TOML) name what led there. */
function profileOf(flags: TemporalFlags, env: NodeJS.ProcessEnv): ReturnType<typeof loadClientConnectConfig> {
  // The reader skips a config file that is not there, and the settings would silently fall back to
  // localhost: one named on purpose must exist.
  if (env.TEMPORAL_CONFIG_FILE && !existsSync(env.TEMPORAL_CONFIG_FILE)) {
    throw new FabricError('INVALID_ARGUMENT', `TEMPORAL_CONFIG_FILE: cannot read ${env.TEMPORAL_CONFIG_FILE} (ENOENT)`);
  }
  try {
    return loadClientConnectConfig({ ...(flags.profile ? { profile: flags.profile } : {}), overrideEnvVars: environmentOf(env) });
  } catch (err) {
    const source = [
      flags.profile ? `--profile ${flags.profile}` : undefined,
      env.TEMPORAL_PROFILE ? 'TEMPORAL_PROFILE' : undefined,
      env.TEMPORAL_CONFIG_FILE ? `TEMPORAL_CONFIG_FILE=${env.TEMPORAL_CONFIG_FILE}` : undefined,
    ]
      .filter(Boolean)
      .join(', ');
    throw new FabricError(
      'INVALID_ARGUMENT',
      `Temporal connection settings (${source || 'temporal.toml and TEMPORAL_* variables'}): ${(err as Error).message.split('\n')[0]}`,
    );
  }
}

/** A file a flag names; one that cannot be read fails naming the flag. */
function fileOf(path: string, flag: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `${flag}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
    );
  }
}

function environmentOf(env: NodeJS.ProcessEnv): Record<string, string> {
  const defined: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) if (value !== undefined) defined[name] = value;
  return defined;
}

function withoutUndefined(tls: TLSConfig): TLSConfig {
  return Object.fromEntries(Object.entries(tls).filter(([, value]) => value !== undefined)) as TLSConfig;
}
