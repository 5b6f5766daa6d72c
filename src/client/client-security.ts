// What a client process holds: the payload codec keys (every client needs them to read or write agent
// workflows) and, in the control plane only, the capability signing keys that mint agents' tokens.
// From the environment or files, never flags.
import { CapabilityIssuer } from '../security/capability-issuer';
import { keyListFromEnv } from '../security/key-list';
import { CodecKeyRing } from '../security/payload-codec';

export interface ClientSecurity {
  codec: CodecKeyRing;
  /** Absent: this client acts only with capabilities it is given, and cannot start or fork agents itself. */
  issuer?: CapabilityIssuer;
  /** Lifetime of minted capabilities, seconds (default 24 h). */
  capabilityLifetimeS?: number;
}

/** A positive whole number of seconds from the environment, or undefined when unset. */
function secondsFromEnv(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const text = env[name];
  if (text === undefined) return undefined;
  const seconds = Number(text);
  if (!Number.isSafeInteger(seconds) || seconds < 1) throw new Error(`${name} must be a positive integer (seconds)`);
  return seconds;
}

export function clientSecurityFromEnv(env: NodeJS.ProcessEnv = process.env): ClientSecurity {
  const signing = keyListFromEnv(env, 'KVFABRIC_SIGNING_KEYS');
  const lifetime = secondsFromEnv(env, 'KVFABRIC_CAPABILITY_LIFETIME_S');
  const maxLifetimeS = secondsFromEnv(env, 'KVFABRIC_MAX_CAPABILITY_LIFETIME_S');
  const issuerOptions = { activeKeyId: env.KVFABRIC_SIGNING_ACTIVE_KEY ?? signing?.[0]?.id, ...(maxLifetimeS === undefined ? {} : { maxLifetimeS }) };
  return {
    codec: codecKeyRingFromEnv(env),
    ...(signing ? { issuer: new CapabilityIssuer(signing, issuerOptions) } : {}),
    ...(lifetime !== undefined ? { capabilityLifetimeS: lifetime } : {}),
  };
}

/** KVFABRIC_CODEC_KEYS (or _FILE): every key decodes, KVFABRIC_CODEC_ACTIVE_KEY (default the first) encodes. */
export function codecKeyRingFromEnv(env: NodeJS.ProcessEnv = process.env): CodecKeyRing {
  const codecKeys = keyListFromEnv(env, 'KVFABRIC_CODEC_KEYS');
  if (!codecKeys) throw new Error('no payload codec key: set KVFABRIC_CODEC_KEYS="id=base64key" (or KVFABRIC_CODEC_KEYS_FILE)');
  return new CodecKeyRing(codecKeys, env.KVFABRIC_CODEC_ACTIVE_KEY ?? codecKeys[0]!.id);
}
