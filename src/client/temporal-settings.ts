// How a process reaches Temporal: address, namespace and TLS, from flags or the environment variables
// Temporal's own tools use (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_TLS_*). Shared by the worker
// and the client, which hand the result to NativeConnection and Connection alike.
import { readFileSync } from 'node:fs';

import type { TLSConfig } from '@temporalio/client';

export interface TemporalSettings {
  address: string;
  namespace: string;
  /** Absent: plaintext (the dev server). */
  tls?: TLSConfig;
}

export interface TemporalFlags {
  address?: string;
  namespace?: string;
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
  tls: { type: 'boolean' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'tls-ca': { type: 'string' },
  'tls-server-name': { type: 'string' },
} as const;

interface ParsedTemporalFlags {
  address?: string;
  namespace?: string;
  tls?: boolean;
  'tls-cert'?: string;
  'tls-key'?: string;
  'tls-ca'?: string;
  'tls-server-name'?: string;
}

/** Settings from parsed TEMPORAL_FLAG_OPTIONS values, falling back to the environment. */
export function temporalSettingsFromFlags(values: ParsedTemporalFlags, env: NodeJS.ProcessEnv = process.env): TemporalSettings {
  return temporalSettings(
    {
      address: values.address,
      namespace: values.namespace,
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
  const address = flags.address ?? env.TEMPORAL_ADDRESS ?? 'localhost:7233';
  const namespace = flags.namespace ?? env.TEMPORAL_NAMESPACE ?? 'default';
  const cert = flags.tlsCert ?? env.TEMPORAL_TLS_CERT;
  const key = flags.tlsKey ?? env.TEMPORAL_TLS_KEY;
  const ca = flags.tlsCa ?? env.TEMPORAL_TLS_CA;
  const serverName = flags.tlsServerName ?? env.TEMPORAL_TLS_SERVER_NAME;
  const tlsOn = flags.tls ?? (env.TEMPORAL_TLS !== undefined ? /^(1|true|yes)$/i.test(env.TEMPORAL_TLS) : false);
  if ((cert === undefined) !== (key === undefined)) throw new Error('TLS needs both a client certificate and its key (--tls-cert and --tls-key)');
  if (!tlsOn && cert === undefined && ca === undefined) return { address, namespace };
  const tls: TLSConfig = {
    ...(serverName ? { serverNameOverride: serverName } : {}),
    ...(ca ? { serverRootCACertificate: readFileSync(ca) } : {}),
    ...(cert && key ? { clientCertPair: { crt: readFileSync(cert), key: readFileSync(key) } } : {}),
  };
  return { address, namespace, tls };
}
