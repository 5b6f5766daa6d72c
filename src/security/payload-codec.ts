// Encrypts every Temporal payload (workflow inputs and the state continue-as-new carries, results,
// updates, signals, queries, memos) with AES-256-GCM before it leaves the process, as in Temporal's
// `encryption` sample: the whole Payload proto is sealed, so even its metadata (the JSON encoding) is
// hidden. The key id sits in the sealed payload's metadata; a key ring decodes with any key it holds
// and encodes with the active one, so keys rotate without rewriting history.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

import { METADATA_ENCODING_KEY, type Payload, type PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';

import type { RawKey } from './key-list';

export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const METADATA_KEY_ID = 'encryption-key-id';
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

export class EncryptionCodec implements PayloadCodec {
  constructor(private readonly ring: CodecKeyRing) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    const id = this.ring.activeKeyId;
    const key = this.ring.key(id)!;
    return payloads.map((payload) => {
      const plain = temporal.api.common.v1.Payload.encode(payload).finish();
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(aadOf(id));
      const sealed = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
      return { metadata: { [METADATA_ENCODING_KEY]: utf8(ENCRYPTED_ENCODING), [METADATA_KEY_ID]: utf8(id) }, data: sealed };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      // Payloads this codec never sealed (none of ours; a tool's plain signal) pass as they are.
      if (text(payload.metadata?.[METADATA_ENCODING_KEY]) !== ENCRYPTED_ENCODING) return payload;
      const id = text(payload.metadata?.[METADATA_KEY_ID]);
      const key = id === undefined ? undefined : this.ring.key(id);
      // The key id is not secret; the payload's bytes never appear in an error.
      if (!key || id === undefined) throw new Error(`payload sealed with key '${id ?? '?'}', which this process does not hold`);
      const sealed = payload.data ?? new Uint8Array();
      if (sealed.length < IV_BYTES + TAG_BYTES) throw new Error('sealed payload is truncated');
      const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(0, IV_BYTES));
      decipher.setAAD(aadOf(id));
      decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
      const plain = Buffer.concat([decipher.update(sealed.subarray(IV_BYTES, sealed.length - TAG_BYTES)), decipher.final()]);
      return temporal.api.common.v1.Payload.decode(plain) as Payload;
    });
  }
}

/** Binds the ciphertext to its key id: relabelling a payload with another id fails authentication. */
function aadOf(keyId: string): Buffer {
  return Buffer.from(`kvfabric.payload.v1\0${keyId}`);
}

function utf8(value: string): Uint8Array {
  return Buffer.from(value, 'utf8');
}

function text(bytes: Uint8Array | null | undefined): string | undefined {
  return bytes ? Buffer.from(bytes).toString('utf8') : undefined;
}
