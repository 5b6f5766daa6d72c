// Encrypts every Temporal payload (workflow inputs and the state continue-as-new carries, results,
// updates, signals, queries, memos) with AES-256-GCM before it leaves the process, as in Temporal's
// `encryption` sample: the whole payload is sealed, so even its metadata (the JSON encoding) is hidden.
// Each payload is sealed under a data key derived from the ring's active key (payload-data-keys.ts); the
// sealed payload names the key id and the derivation's salt, so a ring decodes with any key it holds and
// keys rotate without rewriting history.
//
// The sealed format, compact because every payload is written into history:
//   metadata  { encoding: 'binary/encrypted' }, nothing else
//   data      header || iv (12 bytes) || ciphertext || tag (16 bytes)
//   header    0x01 (the format) || key id length (1 byte, 1..255) || key id (UTF-8) || salt (16 bytes)
// The header is AES-GCM's additional authenticated data: any change to it fails authentication, besides
// deriving another key. The plaintext is a form byte and a body:
//   0x00  the Payload proto (any metadata, external storage details)
//   0x01  a payload of data and metadata of exactly one entry, `encoding`: encoding length (1 byte) ||
//         encoding || data (`binary/null`, `binary/plain`, ...).
//   0x02  the same with the encoding `json/plain`, the SDK's usual one: data alone.
// The encoder uses the shortest form that applies.
// Decoding yields exactly the payload that was sealed. Metadata a sealed payload carries besides its
// encoding is not authenticated and is dropped: the decoded payload comes from the plaintext alone.
//
// Decoding refuses what this codec did not seal: where kvfabric's codec is in use it is required, so a
// plaintext payload is someone without the codec keys writing into a history (a plain Temporal client
// starting an agent or sending an update with a capability in it). The one exception is the SDK's
// `binary/null` with no data (an `undefined`), which cannot carry anything. Search attributes and headers
// never reach a codec (the SDK skips them), nor does the SDK core's own marker data. A refusal is a
// FabricError and never shows the payload's bytes: they are the sender's to choose.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

import { METADATA_ENCODING_KEY, type Payload, type PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';

import { FabricError } from '../fabric/errors';
import { checkKeyIds, type RawKey } from './key-list';
import { DataKeys, SALT_BYTES } from './payload-data-keys';
import { quotedId } from '../identity/printable-id';
import { PLAINTEXT_REFUSAL } from './failure-converter';

export const ENCRYPTED_ENCODING = 'binary/encrypted';
/** The SDK's encoding of `undefined`: with no data, the only plaintext payload decoding lets through. */
const NULL_ENCODING = 'binary/null';
const FORMAT = 0x01;
/** One length byte names the key id in the header, and the encoding in form 1. */
const MAX_NAME_BYTES = 255;
const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const FORM_PROTO = 0x00;
const FORM_ENCODING_ONLY = 0x01;
const FORM_JSON = 0x02;
const JSON_ENCODING = Buffer.from('json/plain');
/** Strict: a key id that is not UTF-8 is refused, not read as another id with U+FFFD in it. */
const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export class CodecKeyRing {
  private readonly keys: Map<string, Buffer>;

  constructor(
    keys: readonly RawKey[],
    readonly activeKeyId: string = keys[0]?.id ?? '',
  ) {
    // Ids are printed and fit the header's one length byte; keys are AES-256 keys: a shorter one is next to no key.
    checkKeyIds(keys, 'payload codec keys');
    for (const { id, key } of keys) {
      const got = key instanceof Uint8Array ? key.length : typeof key;
      if (got !== KEY_BYTES)
        throw new FabricError('INVALID_ARGUMENT', `payload codec key ${quotedId(id)} must be ${KEY_BYTES} bytes (AES-256), got ${got}`);
    }
    this.keys = new Map(keys.map((k) => [k.id, k.key]));
    if (!this.keys.has(activeKeyId))
      throw new FabricError('INVALID_ARGUMENT', `payload codec key ${quotedId(String(activeKeyId))} is not among the keys given`);
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
      const header = headerOf(keyId, salt);
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(header);
      const ciphertext = Buffer.concat([cipher.update(plaintextOf(payload)), cipher.final()]);
      return {
        metadata: { [METADATA_ENCODING_KEY]: utf8(ENCRYPTED_ENCODING) },
        data: Buffer.concat([header, iv, ciphertext, cipher.getAuthTag()]),
      };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => this.open(payload));
  }

  private open(payload: Payload): Payload {
    if (text(payload.metadata?.[METADATA_ENCODING_KEY]) !== ENCRYPTED_ENCODING) {
      if (isBareNull(payload)) return payload;
      throw new FabricError('PERMISSION_DENIED', PLAINTEXT_REFUSAL);
    }
    const sealed = payload.data ?? new Uint8Array();
    const { header, keyId, salt } = readHeader(sealed);
    // The key id is not secret; it is named so that an operator sees which key is missing, escaped (anyone
    // can write a header) so that it names that key and nothing else.
    const key = this.dataKeys.forOpening(keyId, salt);
    if (!key) throw new FabricError('PERMISSION_DENIED', `payload sealed with key ${quotedId(keyId)}, which this process does not hold`);
    if (sealed.length < header.length + IV_BYTES + TAG_BYTES) throw new FabricError('INTEGRITY', 'sealed payload is truncated');
    let plain: Buffer;
    try {
      const iv = sealed.subarray(header.length, header.length + IV_BYTES);
      const decipher = createDecipheriv('aes-256-gcm', key, iv);
      decipher.setAAD(header);
      decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
      plain = Buffer.concat([decipher.update(sealed.subarray(header.length + IV_BYTES, sealed.length - TAG_BYTES)), decipher.final()]);
    } catch {
      // A tag that does not verify: altered bytes, header, salt or key id, or another key under the same id.
      throw new FabricError('INTEGRITY', `sealed payload (key ${quotedId(keyId)}) failed authentication`);
    }
    // Past a good tag only someone holding the key could have written a malformed plaintext; still refused.
    return payloadOf(plain, keyId);
  }
}

/** The key id a sealed payload's header names (not secret); undefined for any other payload. */
export function sealedKeyIdOf(payload: Payload): string | undefined {
  if (text(payload.metadata?.[METADATA_ENCODING_KEY]) !== ENCRYPTED_ENCODING) return undefined;
  try {
    return readHeader(payload.data ?? new Uint8Array()).keyId;
  } catch {
    return undefined;
  }
}

interface Header {
  /** The header's bytes as they stand in the payload: the additional authenticated data. */
  header: Uint8Array;
  keyId: string;
  salt: Buffer;
}

function headerOf(keyId: string, salt: Buffer): Buffer {
  const id = utf8(keyId);
  return Buffer.concat([Buffer.from([FORMAT, id.length]), id, salt]);
}

function readHeader(sealed: Uint8Array): Header {
  if (sealed.length === 0 || sealed[0] !== FORMAT) throw new FabricError('INTEGRITY', 'sealed payload has an unknown format');
  const idLength = sealed[1] ?? 0;
  if (idLength === 0) throw new FabricError('INTEGRITY', 'sealed payload header names no key id');
  const end = 2 + idLength + SALT_BYTES;
  if (sealed.length < end) throw new FabricError('INTEGRITY', 'sealed payload header is truncated');
  let keyId: string;
  try {
    keyId = STRICT_UTF8.decode(sealed.subarray(2, 2 + idLength));
  } catch {
    throw new FabricError('INTEGRITY', 'sealed payload header names a key id that is not UTF-8');
  }
  return { header: sealed.subarray(0, end), keyId, salt: Buffer.from(sealed.subarray(2 + idLength, end)) };
}

/**
 * Form 2 or 1 when the payload is only data and one short `encoding` (2: `json/plain`), else form 0: the
 * whole Payload proto (other metadata, or the external storage details the SDK's reference payloads carry).
 */
function plaintextOf(payload: Payload): Buffer {
  const metadata = payload.metadata ?? {};
  const names = Object.keys(metadata);
  const encoding = metadata[METADATA_ENCODING_KEY];
  if (names.length === 1 && encoding && encoding.length <= MAX_NAME_BYTES && !payload.externalPayloads?.length) {
    const data = bytesOf(payload.data);
    if (JSON_ENCODING.equals(encoding)) return Buffer.concat([Buffer.from([FORM_JSON]), data]);
    return Buffer.concat([Buffer.from([FORM_ENCODING_ONLY, encoding.length]), bytesOf(encoding), data]);
  }
  return Buffer.concat([Buffer.from([FORM_PROTO]), temporal.api.common.v1.Payload.encode(payload).finish()]);
}

/** Payload bytes as the SDK hands them: a Uint8Array, or (an update's empty result) a plain array or nothing. */
function bytesOf(field: Uint8Array | ArrayLike<number> | null | undefined): Uint8Array {
  if (field instanceof Uint8Array) return field;
  return Uint8Array.from(field ?? []);
}

function payloadOf(plain: Buffer, keyId: string): Payload {
  const malformed = () => new FabricError('INTEGRITY', `sealed payload (key ${quotedId(keyId)}) holds a malformed payload`);
  const body = plain.subarray(1);
  if (plain[0] === FORM_JSON) return { metadata: { [METADATA_ENCODING_KEY]: Buffer.from(JSON_ENCODING) }, data: body };
  if (plain[0] === FORM_ENCODING_ONLY) {
    const length = body[0];
    if (length === undefined || body.length < 1 + length) throw malformed();
    return { metadata: { [METADATA_ENCODING_KEY]: body.subarray(1, 1 + length) }, data: body.subarray(1 + length) };
  }
  if (plain[0] === FORM_PROTO) {
    try {
      return temporal.api.common.v1.Payload.decode(body) as Payload;
    } catch {
      throw malformed();
    }
  }
  throw new FabricError('INTEGRITY', `sealed payload (key ${quotedId(keyId)}) has an unknown form`);
}

/** `binary/null`, nothing else in its metadata and no data: the SDK's `undefined`. */
function isBareNull(payload: Payload): boolean {
  const metadata = payload.metadata ?? {};
  return text(metadata[METADATA_ENCODING_KEY]) === NULL_ENCODING && Object.keys(metadata).length === 1 && (payload.data?.length ?? 0) === 0;
}

function utf8(value: string): Buffer {
  return Buffer.from(value, 'utf8');
}

function text(bytes: Uint8Array | null | undefined): string | undefined {
  return bytes ? Buffer.from(bytes).toString('utf8') : undefined;
}
