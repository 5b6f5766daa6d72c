// Master keys of the cold tier and what is done with them: wrapping and unwrapping the random data key of
// each segment or manifest file, and deriving the keys of other uses (the shared directory's record MACs).
// The raw key bytes stay inside this module (as KeyObjects), never reach a worker thread, and never
// appear in messages, inspection or JSON.

import { createCipheriv, createDecipheriv, createSecretKey, hkdfSync, randomFillSync, type KeyObject } from 'node:crypto';
import { inspect } from 'node:util';

import { FabricError } from '../../fabric/errors';
import { describe } from './validation';

export interface MasterKey {
  /** Printable ASCII without spaces, 1 to 128 characters; stored in every file header, so not secret. */
  id: string;
  /** 32 bytes (AES-256). */
  key: Uint8Array;
}

export const DATA_KEY_BYTES = 32;
/** RFC 3394 key wrap of a 32-byte key: 8 bytes of integrity check value plus the key. */
export const WRAPPED_KEY_BYTES = 40;
const KEY_ID = /^[\x21-\x7e]{1,128}$/;
// RFC 3394's default initial value: the unwrap checks it, which is the wrap's integrity check.
const KEY_WRAP_IV = Buffer.from('a6a6a6a6a6a6a6a6', 'hex');
const KEY_WRAP_CIPHER = 'id-aes256-wrap';

/**
 * A fresh random data key in memory of its own (Buffer.alloc never uses Node's shared pool), so zeroing
 * it clears the only copy and sending it to a crypto thread sends 32 bytes and nothing else.
 */
export function newDataKey(): Buffer {
  return randomFillSync(Buffer.alloc(DATA_KEY_BYTES));
}

export type UnwrapResult = { ok: true; dataKey: Buffer } | { ok: false; reason: 'unknown-key' | 'unwrap-failed' };

/**
 * Master keys for rotation: new files are wrapped with the active key; existing files unwrap with any key
 * of the ring, found by the key id in their header. A ring is immutable; `withActive` makes the next one.
 */
export class KeyRing {
  readonly activeKeyId: string;
  private readonly keys: ReadonlyMap<string, KeyObject>;
  /** Derived keys by master key id and purpose, made on first use: the ring's keys never change. */
  private readonly derived = new Map<string, KeyObject>();

  constructor(keys: readonly MasterKey[], activeKeyId: string) {
    if (!Array.isArray(keys) || keys.length === 0) {
      throw new FabricError('INVALID_ARGUMENT', 'a key ring needs at least one master key');
    }
    const map = new Map<string, KeyObject>();
    keys.forEach((entry: unknown, i) => {
      if (typeof entry !== 'object' || entry === null) throw new FabricError('INVALID_ARGUMENT', `keys[${i}] must be an object`);
      const { id, key } = entry as Record<string, unknown>;
      if (typeof id !== 'string' || !KEY_ID.test(id)) {
        throw new FabricError(
          'INVALID_ARGUMENT',
          `keys[${i}].id must be 1 to 128 printable ASCII characters without spaces, got ${describe(id)}`,
        );
      }
      if (!(key instanceof Uint8Array) || key.byteLength !== 32) {
        // Only the length is named: the bytes are secret.
        const what = key instanceof Uint8Array ? `${key.byteLength} bytes` : describe(key);
        throw new FabricError('INVALID_ARGUMENT', `master key '${id}' must be a 32-byte Uint8Array, got ${what}`);
      }
      if (map.has(id)) throw new FabricError('INVALID_ARGUMENT', `master key id '${id}' appears twice in the key ring`);
      // createSecretKey copies the bytes, so later changes to the caller's buffer do not reach the ring.
      map.set(id, createSecretKey(Buffer.from(key.buffer, key.byteOffset, key.byteLength)));
    });
    if (typeof activeKeyId !== 'string' || !map.has(activeKeyId)) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        `active key id ${describe(activeKeyId)} is not in the key ring (${[...map.keys()].join(', ')})`,
      );
    }
    this.keys = map;
    this.activeKeyId = activeKeyId;
  }

  get keyIds(): string[] {
    return [...this.keys.keys()];
  }

  has(keyId: string): boolean {
    return this.keys.has(keyId);
  }

  /** The same keys with another active one: the rotation step once the new key is in every reader's ring. */
  withActive(keyId: string): KeyRing {
    return new KeyRing(
      [...this.keys].map(([id, key]) => ({ id, key: key.export() })),
      keyId,
    );
  }

  /** Wraps a data key with the active master key (AES-256 key wrap, RFC 3394). */
  wrapDataKey(dataKey: Uint8Array): { keyId: string; wrapped: Buffer } {
    const cipher = createCipheriv(KEY_WRAP_CIPHER, this.keys.get(this.activeKeyId)!, KEY_WRAP_IV);
    const wrapped = Buffer.concat([cipher.update(dataKey), cipher.final()]);
    return { keyId: this.activeKeyId, wrapped };
  }

  /**
   * A key of its own for another use of master key `keyId` (HKDF-SHA256, `purpose` as its info), so that
   * no two uses share key material; undefined when the ring lacks that key. The master key stays here;
   * each derived key is made once.
   */
  derivedKey(keyId: string, purpose: string): KeyObject | undefined {
    const masterKey = this.keys.get(keyId);
    if (masterKey === undefined) return undefined;
    const name = `${keyId}\0${purpose}`;
    let key = this.derived.get(name);
    if (key === undefined) {
      const bytes = Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), purpose, DATA_KEY_BYTES));
      try {
        key = createSecretKey(bytes);
      } finally {
        bytes.fill(0);
      }
      this.derived.set(name, key);
    }
    return key;
  }

  unwrapDataKey(keyId: string, wrapped: Uint8Array): UnwrapResult {
    const masterKey = this.keys.get(keyId);
    if (masterKey === undefined) return { ok: false, reason: 'unknown-key' };
    try {
      const decipher = createDecipheriv(KEY_WRAP_CIPHER, masterKey, KEY_WRAP_IV);
      const unwrapped = decipher.update(wrapped);
      const rest = decipher.final();
      const ok = unwrapped.length + rest.length === DATA_KEY_BYTES && rest.length === 0;
      // Copied into memory of its own (see newDataKey) and the intermediate zeroed.
      const dataKey = Buffer.alloc(DATA_KEY_BYTES);
      if (ok) unwrapped.copy(dataKey);
      unwrapped.fill(0);
      return ok ? { ok: true, dataKey } : { ok: false, reason: 'unwrap-failed' };
    } catch {
      // OpenSSL's message says nothing useful here; the caller names the file and context.
      return { ok: false, reason: 'unwrap-failed' };
    }
  }

  toJSON(): object {
    return { activeKeyId: this.activeKeyId, keyIds: this.keyIds };
  }

  [inspect.custom](): string {
    return `KeyRing { active: '${this.activeKeyId}', keys: [${this.keyIds.map((id) => `'${id}'`).join(', ')}] }`;
  }
}
