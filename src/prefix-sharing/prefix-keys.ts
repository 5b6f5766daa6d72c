// Content-addressed keys of a prompt's full blocks: what lets one tenant's agents share the KV of a common
// prefix on a worker, and never another tenant's. Block i's key is SHA-256 over block i-1's key, the
// block's token ids, the engine fingerprint and the tenant's salt, so a key names the whole prefix up to
// its block, as the engine that computed it and for one tenant only. The salt is an HMAC of the tenant
// id under a key the worker derives from its key ring: no caller supplies it or sees it, and a caller
// naming another tenant's prompt gets keys of its own tenant, which match nothing of the other's.
// A partial last block never has a key: its KV would change as the block fills.
import { createHash, createHmac, type KeyObject } from 'node:crypto';

import type { EngineFingerprint } from '../engines/fingerprint';
import { FabricError } from '../fabric/errors';
import type { KeyRing } from '../tiers/cold';

/** The key ring's derived key for prefix salts: its own purpose, so it shares no key material with any other use. */
const SALT_KEY_PURPOSE = 'kvfabric prefix-sharing tenant salt v1';

/** A tenant's salt: only a worker holding the key ring computes it. */
export type TenantSalt = Buffer;

/** The salts of tenants, under the ring's active key (a rotation starts new keys: old prefixes are simply not found). */
export class TenantSalts {
  private readonly key: KeyObject;

  constructor(keyRing: Pick<KeyRing, 'activeKeyId' | 'derivedKey'>) {
    const key = keyRing.derivedKey(keyRing.activeKeyId, SALT_KEY_PURPOSE);
    if (!key) throw new FabricError('INVALID_ARGUMENT', 'the key ring lacks its active key');
    this.key = key;
  }

  /** The tenant's salt: HMAC-SHA-256 of its id (the checked name a verified capability carries). */
  of(tenant: string): TenantSalt {
    if (typeof tenant !== 'string' || tenant.length === 0) throw new FabricError('INVALID_ARGUMENT', 'a tenant id is a non-empty string');
    return createHmac('sha256', this.key).update('tenant\0').update(tenant, 'utf8').digest();
  }
}

/** What a key is taken over besides the tokens: the engine that computes the KV, and whose it is. */
export interface PrefixScope {
  fingerprint: EngineFingerprint;
  salt: TenantSalt;
  tokensPerBlock: number;
}

/**
 * The keys (hex) of every full block of `tokens`, in order: floor(tokens.length / tokensPerBlock) of them.
 * Only what decides whether two KV bytes mean the same is taken from the fingerprint (requireCompatible's
 * fields), so a newer engine build keeps finding the prefixes an older one computed on this worker.
 */
export function prefixKeys(tokens: ArrayLike<number>, scope: PrefixScope): string[] {
  const { tokensPerBlock, salt } = scope;
  if (!Number.isSafeInteger(tokensPerBlock) || tokensPerBlock < 1) {
    throw new FabricError('INVALID_ARGUMENT', `tokensPerBlock must be a positive integer, got ${tokensPerBlock}`);
  }
  const engine = fingerprintBytes(scope.fingerprint);
  const keys: string[] = [];
  let previous = Buffer.alloc(32);
  const block = Buffer.alloc(tokensPerBlock * 4);
  for (let start = 0; start + tokensPerBlock <= tokens.length; start += tokensPerBlock) {
    for (let i = 0; i < tokensPerBlock; i++) block.writeUInt32LE(tokens[start + i]!, i * 4);
    previous = createHash('sha256').update(previous).update(block).update(engine).update(salt).digest();
    keys.push(previous.toString('hex'));
  }
  return keys;
}

function fingerprintBytes(fingerprint: EngineFingerprint): Buffer {
  const { engine, modelSha256, flashAttention, kType, vType, shape } = fingerprint;
  const compared = [engine, modelSha256, flashAttention, kType, vType, shape.layers, shape.kvHeads, shape.headDim, shape.dtypeBytes];
  return createHash('sha256').update(JSON.stringify(compared)).digest();
}
