// `kvfabric codec-server`: the Temporal Web UI's codec endpoint (src/security/codec-server.ts) as a
// process, with the payload codec keys and the bearer token from the environment or files (never flags:
// they show in `ps`). Serves until SIGINT or SIGTERM, then stops taking connections and exits 0.
import { parseArgs } from 'node:util';

import { codecKeyRingFromEnv } from '../client/client-security';
import { startCodecServer } from '../security/codec-server';
import { DEFAULT_CODEC_SERVER_LIMITS } from '../security/codec-server-limits';
import { readProtectedFile } from '../security/protected-file';
import { EncryptionCodec } from '../security/payload-codec';
import { CliUsageError } from './usage-error';

export const DEFAULT_CODEC_SERVER_PORT = 8234;
/** The dev server's UI; a deployed UI's origin comes with --ui-origin. */
export const DEFAULT_UI_ORIGIN = 'http://localhost:8233';
const STOP_SIGNALS = ['SIGINT', 'SIGTERM'] as const;

export interface CodecServerCall {
  port: number;
  host: string;
  uiOrigin: string;
  maxConnections: number;
}

export function parseCodecServerCall(argv: string[]): CodecServerCall {
  const usage = (message: string) => new CliUsageError(message, 'codec-server');
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        port: { type: 'string' },
        host: { type: 'string' },
        'ui-origin': { type: 'string' },
        'max-connections': { type: 'string' },
      },
    }));
  } catch (err) {
    throw usage((err as Error).message);
  }
  const portText = values.port ?? String(DEFAULT_CODEC_SERVER_PORT);
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) throw usage(`--port must be a port number from 0 to 65535, got '${portText}'`);
  let uiOrigin: string;
  try {
    uiOrigin = new URL(values['ui-origin'] ?? DEFAULT_UI_ORIGIN).origin;
  } catch {
    throw usage(`--ui-origin must be a URL such as ${DEFAULT_UI_ORIGIN}, got '${values['ui-origin']}'`);
  }
  const connectionsText = values['max-connections'] ?? String(DEFAULT_CODEC_SERVER_LIMITS.maxConnections);
  const maxConnections = Number(connectionsText);
  if (!/^\d+$/.test(connectionsText) || maxConnections < 1 || maxConnections > 65535)
    throw usage(`--max-connections must be a number from 1 to 65535, got '${connectionsText}'`);
  return { port, host: values.host ?? '127.0.0.1', uiOrigin, maxConnections };
}

/** KVFABRIC_CODEC_SERVER_TOKEN, else the file KVFABRIC_CODEC_SERVER_TOKEN_FILE names (trimmed; refused when others can read it). */
export function codecServerTokenFromEnv(env: NodeJS.ProcessEnv): string {
  const file = env.KVFABRIC_CODEC_SERVER_TOKEN_FILE;
  const token =
    env.KVFABRIC_CODEC_SERVER_TOKEN ?? (file ? readProtectedFile(file, 'KVFABRIC_CODEC_SERVER_TOKEN_FILE', 'secret').trim() : undefined);
  if (!token)
    throw new Error(
      'no codec server token: set KVFABRIC_CODEC_SERVER_TOKEN or KVFABRIC_CODEC_SERVER_TOKEN_FILE (kvfabric keygen writes one)',
    );
  return token;
}

export async function codecServer(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  print: (line: string) => void = console.log,
): Promise<void> {
  const call = parseCodecServerCall(argv);
  const ring = codecKeyRingFromEnv(env);
  const server = await startCodecServer({
    codec: new EncryptionCodec(ring),
    token: codecServerTokenFromEnv(env),
    uiOrigin: call.uiOrigin,
    host: call.host,
    port: call.port,
    limits: { maxConnections: call.maxConnections },
  });
  print(
    `kvfabric codec server listening on ${server.url} for ${call.uiOrigin} ` +
      `(encodes with '${ring.activeKeyId}'); ` +
      `a UI without an access token uses ${server.url}/<token>`,
  );
  const signal = await new Promise<string>((resolve) => {
    for (const name of STOP_SIGNALS) process.once(name, () => resolve(name));
  });
  await server.close();
  print(`kvfabric codec server stopped (${signal})`);
}
