// The format of every record that decides access in the store the workers share: grants, epochs,
// fences, tenant ids (docs/security.md, "Shared-directory records"). Whoever can write that store (a user
// who can write the tier root, a shared mount, anyone with write access to the bucket) can put any blob
// there, so a record counts only when it carries a MAC under a key derived from the workers' master keys,
// over its kind and its context (which grant, of which context; which tenant id): a record planted,
// altered, or moved to another context or kind is INTEGRITY, audited `forged-record`, and trusted by no
// one. With the value an entry of a rising record names inside its body (rising-records.ts), this binds
// each record to the one key it may live under. It is not encrypted: a record holds no secret. Replay of
// an older record of the same kind and context, and deletion, are not caught here (see rising-records.ts
// for what a reader does catch).
//
// Layout (big-endian): magic `KVFCREC\0` (8) | format version (2) | key id length K (2) | body length L
// (4) | master key id (K) | body (L) | HMAC-SHA256 (32). The MAC covers
// "kvfabric.record.v1\0" || kind length (u16) || kind || context length (u32) || context || bytes [0, 16+K+L).
import { createHmac, timingSafeEqual } from 'node:crypto';

import type { BlobStore } from '../blob-store/blob-store';
import { FabricError, isFabricError } from '../fabric/errors';
import type { KeyRing } from '../tiers/cold/key-ring';

const MAGIC = Buffer.from('KVFCREC\0', 'latin1');
const FORMAT_VERSION = 1;
const FIXED_BYTES = 16;
const MAC_BYTES = 32;
const MAC_DOMAIN = 'kvfabric.record.v1\0';
/** HKDF info of the MAC key: no other use of a master key derives the same key. */
const MAC_KEY_PURPOSE = 'kvfabric.shared-directory.record-mac.v1';
/** Records are ids and names; a grant is a few hundred bytes. Anything near this is not one. */
export const MAX_RECORD_BYTES = 64 * 1024;
const KIND = /^[a-z][a-z-]{0,31}$/;

/** Where a record that does not authenticate is reported: the worker's audit log (its AuditSink). */
export interface ForgedRecordSink {
  denied(denial: { agent: string; tenant: string; context: string; action: string; reason: 'forged-record' }): Promise<void>;
}

export class RecordSeal {
  constructor(
    private readonly keyRing: KeyRing,
    /** Where a record that does not authenticate is audited; none in tools and tests that do not audit. */
    private readonly audit?: ForgedRecordSink,
  ) {}

  /** The bytes of a record of `kind` for `context`, under the ring's active key. */
  seal(kind: string, context: string, body: string): Buffer {
    checkKind(kind);
    const keyId = Buffer.from(this.keyRing.activeKeyId, 'utf8');
    const content = Buffer.from(body, 'utf8');
    const length = FIXED_BYTES + keyId.length + content.length + MAC_BYTES;
    if (length > MAX_RECORD_BYTES)
      throw new FabricError('INVALID_ARGUMENT', `a ${kind} record of ${length} bytes is over the ${MAX_RECORD_BYTES} a record may have`);
    const record = Buffer.alloc(length);
    MAGIC.copy(record, 0);
    record.writeUInt16BE(FORMAT_VERSION, 8);
    record.writeUInt16BE(keyId.length, 10);
    record.writeUInt32BE(content.length, 12);
    keyId.copy(record, FIXED_BYTES);
    content.copy(record, FIXED_BYTES + keyId.length);
    const signed = record.subarray(0, length - MAC_BYTES);
    this.mac(this.keyRing.activeKeyId, kind, context, signed)!.copy(record, length - MAC_BYTES);
    return record;
  }

  /** The body of a record of `kind` for `context`; INTEGRITY (audited) unless it authenticates as exactly that. */
  async open(kind: string, context: string, record: Uint8Array): Promise<string> {
    checkKind(kind);
    const bytes = Buffer.from(record.buffer, record.byteOffset, record.byteLength);
    if (bytes.length < FIXED_BYTES + MAC_BYTES || !bytes.subarray(0, MAGIC.length).equals(MAGIC))
      throw await this.forged(kind, context, 'is not a sealed record');
    const version = bytes.readUInt16BE(8);
    if (version !== FORMAT_VERSION) throw await this.forged(kind, context, `has record format ${version}, not ${FORMAT_VERSION}`);
    const keyIdLength = bytes.readUInt16BE(10);
    const bodyLength = bytes.readUInt32BE(12);
    if (bytes.length !== FIXED_BYTES + keyIdLength + bodyLength + MAC_BYTES)
      throw await this.forged(kind, context, 'is truncated or extended');
    const keyId = bytes.toString('utf8', FIXED_BYTES, FIXED_BYTES + keyIdLength);
    const signedEnd = bytes.length - MAC_BYTES;
    const expected = this.mac(keyId, kind, context, bytes.subarray(0, signedEnd));
    if (expected === undefined) throw await this.forged(kind, context, 'is sealed with a master key this worker does not hold');
    if (!timingSafeEqual(expected, bytes.subarray(signedEnd)))
      throw await this.forged(kind, context, `does not authenticate as the ${kind} of this context (planted, altered or moved)`);
    return bytes.toString('utf8', FIXED_BYTES + keyIdLength, signedEnd);
  }

  /**
   * The body of the record under `key` in `store`; undefined when there is none. `size`, when a listing
   * gave it, saves asking the store. At most MAX_RECORD_BYTES are ever read, so a huge blob planted under
   * a record's key costs nothing; it, a link or a device in its place, and a record that changed while it
   * was read (records are never rewritten) are INTEGRITY, audited.
   */
  async read(store: BlobStore, key: string, kind: string, context: string, size?: number): Promise<string | undefined> {
    let bytes: Buffer | undefined;
    try {
      const length = size ?? (await store.head(key))?.size;
      if (length === undefined) return undefined;
      if (length < 1 || length > MAX_RECORD_BYTES) throw new FabricError('INTEGRITY', `has ${length} bytes, no record has`);
      // Ranged to the size seen: whatever replaces the blob meanwhile, no more than that is read.
      bytes = (await store.get(key, { offset: 0, length }))?.bytes;
    } catch (err) {
      if (isFabricError(err, 'OUT_OF_RANGE')) throw await this.forged(kind, context, 'shrank while it was read: it was replaced');
      if (isFabricError(err, 'INTEGRITY')) throw await this.forged(kind, context, err.message);
      throw err;
    }
    return bytes === undefined ? undefined : this.open(kind, context, bytes);
  }

  /** Audits a record that must not be trusted, and gives the INTEGRITY error to throw. */
  async forged(kind: string, context: string, why: string): Promise<FabricError> {
    await this.audit?.denied({ agent: '', tenant: '', context, action: `open-${kind}`, reason: 'forged-record' }).catch(() => undefined);
    return new FabricError('INTEGRITY', `the ${kind} record of ${JSON.stringify(context.slice(0, 200))} ${why}`);
  }

  private mac(keyId: string, kind: string, context: string, signed: Buffer): Buffer | undefined {
    const key = this.keyRing.derivedKey(keyId, MAC_KEY_PURPOSE);
    if (key === undefined) return undefined;
    const kindBytes = Buffer.from(kind, 'utf8');
    const contextBytes = Buffer.from(context, 'utf8');
    const lengths = Buffer.alloc(6);
    lengths.writeUInt16BE(kindBytes.length, 0);
    lengths.writeUInt32BE(contextBytes.length, 2);
    return createHmac('sha256', key)
      .update(MAC_DOMAIN)
      .update(lengths.subarray(0, 2))
      .update(kindBytes)
      .update(lengths.subarray(2))
      .update(contextBytes)
      .update(signed)
      .digest();
  }
}

function checkKind(kind: string): void {
  if (!KIND.test(kind)) throw new FabricError('INVALID_ARGUMENT', `a record kind is 1 to 32 of [a-z-], got ${JSON.stringify(kind)}`);
}
