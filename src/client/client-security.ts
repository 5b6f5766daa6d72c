// What a client process holds: the payload codec keys (every client needs them to read or write agent
// workflows) and, in the control plane only, the capability signing keys that mint agents' tokens.
// From the environment or files, never flags. Every failure is a FabricError naming the setting.
import { CapabilityIssuer } from '../security/capability-issuer';
import { keyListFromEnv, type RawKey } from '../security/key-list';
import { FabricError } from '../fabric/errors';
import { CodecKeyRing } from '../security/payload-codec';

/** @experimental Its keys may move under a key provider. */
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
  if (!Number.isSafeInteger(seconds) || seconds < 1)
    throw new FabricError('INVALID_ARGUMENT', `${name} must be a positive integer (seconds), got '${text}'`);
  return seconds;
}

export function clientSecurityFromEnv(env: NodeJS.ProcessEnv = process.env): ClientSecurity {
  const signing = keysFrom(env, 'KVFABRIC_SIGNING_KEYS');
  const lifetime = secondsFromEnv(env, 'KVFABRIC_CAPABILITY_LIFETIME_S');
  const maxLifetimeS = secondsFromEnv(env, 'KVFABRIC_MAX_CAPABILITY_LIFETIME_S');
  const activeKeyId = env.KVFABRIC_SIGNING_ACTIVE_KEY ?? signing?.[0]?.id;
  if (signing && !signing.some(({ id }) => id === activeKeyId))
    throw new FabricError('INVALID_ARGUMENT', `KVFABRIC_SIGNING_ACTIVE_KEY: '${activeKeyId}' is not among the signing keys given`);
  const issuerOptions = { activeKeyId, ...(maxLifetimeS === undefined ? {} : { maxLifetimeS }) };
  return {
    codec: codecKeyRingFromEnv(env),
    ...(signing ? { issuer: new CapabilityIssuer(signing, issuerOptions) } : {}),
    ...(lifetime !== undefined ? { capabilityLifetimeS: lifetime } : {}),
  };
}

/** KVFABRIC_CODEC_KEYS (or _FILE): every key decodes, KVFABRIC_CODEC_ACTIVE_KEY (default the first) encodes. */
export function codecKeyRingFromEnv(env: NodeJS.ProcessEnv = process.env): CodecKeyRing {
  const codecKeys = keysFrom(env, 'KVFABRIC_CODEC_KEYS');
  if (!codecKeys) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      'no payload codec key: set KVFABRIC_CODEC_KEYS_FILE to the codec.keys that `kvfabric keygen` wrote ' +
        '(or KVFABRIC_CODEC_KEYS="id=base64key")',
    );
  }
  const active = env.KVFABRIC_CODEC_ACTIVE_KEY ?? codecKeys[0]!.id;
  if (!codecKeys.some(({ id }) => id === active))
    throw new FabricError('INVALID_ARGUMENT', `KVFABRIC_CODEC_ACTIVE_KEY: '${active}' is not among the payload codec keys given`);
  return new CodecKeyRing(codecKeys, active);
}

/** A key list setting (inline or `_FILE`); a malformed one is INVALID_ARGUMENT naming the setting (key-list.ts names it). */
function keysFrom(env: NodeJS.ProcessEnv, variable: string): RawKey[] | undefined {
  try {
    return keyListFromEnv(env, variable);
  } catch (err) {
    if (err instanceof FabricError) throw err;
    throw new FabricError('INVALID_ARGUMENT', (err as Error).message);
  }
}
