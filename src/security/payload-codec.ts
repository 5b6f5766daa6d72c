// Encrypts every Temporal payload (workflow inputs and the state continue-as-new carries, results,
// updates, signals, queries, memos) with AES-256-GCM before it leaves the process, as in Temporal's
// `encryption` sample: the whole Payload proto is sealed, so even its metadata (the JSON encoding) is
// hidden. Each payload is sealed under a data key derived from the ring's active key (payload-data-keys.ts);
// its metadata names the key id and the derivation's salt, so a ring decodes with any key it holds and
// keys rotate without rewriting history.
//
// Decoding refuses what this codec did not seal: where kvfabric's codec is in use it is required, so a
// plaintext payload is someone without the codec keys writing into a history (a plain Temporal client
// starting an agent or sending an update with a capability in it). The one exception is the SDK's
// `binary/null` with no data (an `undefined`), which cannot carry anything. Search attributes and headers
// never reach a codec (the SDK skips them), nor does the SDK core's own marker data.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

import { METADATA_ENCODING_KEY, type Payload, type PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';

import { FabricError } from '../fabric/errors';
import type { RawKey } from './key-list';
import { DataKeys, SALT_BYTES } from './payload-data-keys';

export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const METADATA_KEY_ID = 'encryption-key-id';
export const METADATA_KEY_SALT = 'encryption-key-salt';
/** The SDK's encoding of `undefined`: with no data, the only plaintext payload decoding lets through. */
const NULL_ENCODING = 'binary/null';
const IV_BYTES = 12;
const TAG_BYTES = 16;

export class CodecKeyRing {
  private readonly keys: Map<string, Buffer>;

  constructor(
    keys: readonly RawKey[],
    readonly activeKeyId: string = keys[0]?.id ?? '',
  ) {
    this.keys = new Map(keys.map((k) => [k.id, k.key]));
    if (!this.keys.has(activeKeyId)) throw new Error(`payload codec key '${activeKeyId}' is not among the keys given`);
  }

  key(id: string): Buffer | undefined {
    return this.keys.get(id);
  }
}

export interface EncryptionCodecOptions {
  /** Seals per derived data key before a fresh one is derived (default 2^31; tests make it small). */
  sealsPerDataKey?: number;
}

export class EncryptionCodec implements PayloadCodec {
  private readonly dataKeys: DataKeys;

  constructor(ring: CodecKeyRing, options: EncryptionCodecOptions = {}) {
    this.dataKeys = new DataKeys(ring, options.sealsPerDataKey);
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      const { keyId, salt, key } = this.dataKeys.forSealing();
      const plain = temporal.api.common.v1.Payload.encode(payload).finish();
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const sealed = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
      return {
        metadata: { [METADATA_ENCODING_KEY]: utf8(ENCRYPTED_ENCODING), [METADATA_KEY_ID]: utf8(keyId), [METADATA_KEY_SALT]: salt },
        data: sealed,
      };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => this.open(payload));
  }

  private open(payload: Payload): Payload {
    const encoding = text(payload.metadata?.[METADATA_ENCODING_KEY]);
    if (encoding !== ENCRYPTED_ENCODING) {
      if (isBareNull(payload)) return payload;
      // Neither the encoding's value nor the bytes go into the error: both are the sender's to choose.
      throw new FabricError(
        'PERMISSION_DENIED',
        'a plaintext payload was refused: payloads must be sealed with a payload codec key this process holds',
      );
    }
    const id = text(payload.metadata?.[METADATA_KEY_ID]);
    const salt = payload.metadata?.[METADATA_KEY_SALT];
    if (id === undefined || !salt || salt.length !== SALT_BYTES)
      throw new FabricError('INTEGRITY', 'sealed payload has no key id or no valid key salt');
    // The key id is not secret; the payload's bytes never appear in an error.
    const key = this.dataKeys.forOpening(id, Buffer.from(salt));
    if (!key) throw new FabricError('PERMISSION_DENIED', `payload sealed with key '${id.slice(0, 64)}', which this process does not hold`);
    const sealed = payload.data ?? new Uint8Array();
    if (sealed.length < IV_BYTES + TAG_BYTES) throw new FabricError('INTEGRITY', 'sealed payload is truncated');
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(0, IV_BYTES));
      decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
      const plain = Buffer.concat([decipher.update(sealed.subarray(IV_BYTES, sealed.length - TAG_BYTES)), decipher.final()]);
      return temporal.api.common.v1.Payload.decode(plain) as Payload;
    } catch {
      // A tag that does not verify: altered bytes, salt or key id, or another key under the same id.
      throw new FabricError('INTEGRITY', `sealed payload (key '${id.slice(0, 64)}') failed authentication`);
    }
  }
}

/** `binary/null`, nothing else in its metadata and no data: the SDK's `undefined`. */
function isBareNull(payload: Payload): boolean {
  const metadata = payload.metadata ?? {};
  return text(metadata[METADATA_ENCODING_KEY]) === NULL_ENCODING && Object.keys(metadata).length === 1 && (payload.data?.length ?? 0) === 0;
}

function utf8(value: string): Uint8Array {
  return Buffer.from(value, 'utf8');
}

function text(bytes: Uint8Array | null | undefined): string | undefined {
  return bytes ? Buffer.from(bytes).toString('utf8') : undefined;
}
