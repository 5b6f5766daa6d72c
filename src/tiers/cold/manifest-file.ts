// Manifest files: a context's manifest as JSON, sealed with AES-256-GCM under a fresh data key that the
// master key ring wraps, behind a small versioned header (layout in docs/cold-tier.md, "Manifest file").
// The header's CRC-32 separates a damaged file (INTEGRITY) from a key this ring lacks (PERMISSION_DENIED);
// the GCM tag authenticates the header, the content and the context id the reader asked for.

import { crc32 } from 'node:zlib';

import { FabricError } from '../../fabric/errors';
import { counterIv, manifestAad, TAG_BYTES } from './associated-data';
import type { CryptoPool, OpenResult } from './crypto-pool';
import { newDataKey, WRAPPED_KEY_BYTES, type KeyRing } from './key-ring';
import type { ContextManifest } from './types';
import { checkStoredManifest } from './validation';

export const MANIFEST_MAGIC = Buffer.from('KVFCMAN\0', 'latin1');
export const MANIFEST_FORMAT_VERSION = 1;
/** A 128k-token context at 16 tokens per block is 8192 pages, about 1.3 MB of JSON; this is far above. */
export const MAX_MANIFEST_FILE_BYTES = 256 * 1024 * 1024;
const FIXED_BYTES = 56;

/**
 * Seals `manifest` (already validated) into the bytes of its file. `logDigest`: the manifest-log digest of
 * this version (manifest-log.ts), for a base written from the log; later records chain to it.
 */
export function sealManifest(manifest: ContextManifest, keyRing: KeyRing, crypto: CryptoPool, logDigest?: string): Promise<Buffer> {
  const value = logDigest === undefined ? manifest : { ...manifest, logDigest };
  return sealRecord(value, MANIFEST_MAGIC, (header) => manifestAad(header, manifest.contextId), keyRing, crypto);
}

/** Opens the bytes of `contextId`'s manifest file, or throws INTEGRITY / PERMISSION_DENIED naming it. */
export async function openManifest(file: Buffer, contextId: string, keyRing: KeyRing, crypto: CryptoPool): Promise<ContextManifest> {
  return (await openManifestBase(file, contextId, keyRing, crypto)).manifest;
}

/** openManifest, with the log digest the base was sealed with, if any. */
export async function openManifestBase(
  file: Buffer,
  contextId: string,
  keyRing: KeyRing,
  crypto: CryptoPool,
): Promise<{ manifest: ContextManifest; logDigest?: string }> {
  const where = `context '${contextId}': manifest`;
  const parsed = await openRecord(file, MANIFEST_MAGIC, (header) => manifestAad(header, contextId), where, keyRing, crypto);
  const manifest = checkStoredManifest(parsed, contextId);
  // The associated data already binds the id; this only makes a writer bug visible.
  if (manifest.contextId !== contextId) throw new FabricError('INTEGRITY', `${where} belongs to context '${manifest.contextId}'`);
  const { logDigest } = parsed as { logDigest?: unknown };
  if (logDigest !== undefined && (typeof logDigest !== 'string' || !/^[0-9a-f]{64}$/.test(logDigest)))
    throw new FabricError('INTEGRITY', `${where}: its log digest is malformed`);
  return logDigest === undefined ? { manifest } : { manifest, logDigest };
}

/**
 * Seals a JSON value behind the header of a file of kind `magic` (8 bytes); `aad` binds the authenticated
 * header to what the file is for (manifest or manifest-log record: associated-data.ts).
 */
export async function sealRecord(
  value: unknown,
  magic: Buffer,
  aad: (header: Buffer) => Buffer,
  keyRing: KeyRing,
  crypto: CryptoPool,
): Promise<Buffer> {
  const body = Buffer.from(JSON.stringify(value), 'utf8');
  const dataKey = newDataKey();
  try {
    const { keyId, wrapped } = keyRing.wrapDataKey(dataKey);
    const keyIdBytes = Buffer.from(keyId, 'utf8');
    const header = Buffer.alloc(FIXED_BYTES + keyIdBytes.length + 4);
    magic.copy(header, 0);
    header.writeUInt16BE(MANIFEST_FORMAT_VERSION, 8);
    header.writeUInt16BE(keyIdBytes.length, 10);
    header.writeUInt32BE(body.length, 12);
    wrapped.copy(header, 16);
    keyIdBytes.copy(header, FIXED_BYTES);
    header.writeUInt32BE(crc32(header.subarray(0, header.length - 4)), header.length - 4);

    // A whole ArrayBuffer of its own: the JSON Buffer may sit in Node's shared pool.
    const staged = new Uint8Array(body.length);
    staged.set(body);
    const sealed = await crypto.seal(dataKey, staged, [{ offset: 0, length: body.length, iv: counterIv(0), aad: aad(header) }]);
    return Buffer.concat([header, sealed.bytes, sealed.tags]);
  } finally {
    dataKey.fill(0);
  }
}

/** The JSON value sealed in a file of kind `magic`, or INTEGRITY / PERMISSION_DENIED naming `where`. */
export async function openRecord(
  file: Buffer,
  magic: Buffer,
  aad: (header: Buffer) => Buffer,
  where: string,
  keyRing: KeyRing,
  crypto: CryptoPool,
): Promise<unknown> {
  const corrupt = (why: string): never => {
    throw new FabricError('INTEGRITY', `${where} ${why}`);
  };
  if (file.length < FIXED_BYTES + 4 + TAG_BYTES) corrupt(`is truncated (${file.length} bytes)`);
  if (!file.subarray(0, magic.length).equals(magic)) {
    corrupt(`is not a kvfabric ${magic.equals(MANIFEST_MAGIC) ? 'manifest' : 'manifest log'} file (bad magic)`);
  }
  const keyIdLength = file.readUInt16BE(10);
  const bodyBytes = file.readUInt32BE(12);
  const headerBytes = FIXED_BYTES + keyIdLength + 4;
  if (keyIdLength < 1 || keyIdLength > 128 || file.length < headerBytes) corrupt('header is corrupted');
  if (crc32(file.subarray(0, headerBytes - 4)) !== file.readUInt32BE(headerBytes - 4)) corrupt('header is corrupted (CRC mismatch)');
  const version = file.readUInt16BE(8);
  if (version !== MANIFEST_FORMAT_VERSION)
    corrupt(`format version ${version} is not supported (this build reads ${MANIFEST_FORMAT_VERSION})`);
  const expectedBytes = headerBytes + bodyBytes + TAG_BYTES;
  if (file.length !== expectedBytes)
    corrupt(
      `is ${file.length < expectedBytes ? 'truncated' : 'longer than its header says'} ` +
        `(${file.length} bytes, header says ${expectedBytes})`,
    );

  const keyId = file.toString('utf8', FIXED_BYTES, FIXED_BYTES + keyIdLength);
  const unwrapped = keyRing.unwrapDataKey(keyId, file.subarray(16, 16 + WRAPPED_KEY_BYTES));
  if (!unwrapped.ok) {
    if (unwrapped.reason === 'unknown-key') {
      throw new FabricError(
        'PERMISSION_DENIED',
        `${where} is wrapped with master key '${keyId}', which is not in this key ring (${keyRing.keyIds.join(', ')})`,
      );
    }
    throw new FabricError('INTEGRITY', `${where}: its data key does not unwrap with master key '${keyId}' (tampered)`);
  }
  const { dataKey } = unwrapped;
  const staged = new Uint8Array(bodyBytes);
  file.copy(staged, 0, headerBytes, headerBytes + bodyBytes);
  let opened: OpenResult;
  try {
    opened = await crypto.open(dataKey, staged, [
      {
        offset: 0,
        length: bodyBytes,
        iv: counterIv(0),
        aad: aad(file.subarray(0, headerBytes)),
        // A copy: a view would send the whole file along to the crypto thread.
        tag: new Uint8Array(file.subarray(headerBytes + bodyBytes)),
      },
    ]);
  } finally {
    dataKey.fill(0);
  }
  if (opened.failedItem >= 0) corrupt('failed authentication (tampered, truncated, or the manifest of another context)');
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(opened.plaintext.buffer, opened.plaintext.byteOffset, opened.plaintext.byteLength).toString('utf8'));
  } catch {
    corrupt('content is not valid JSON');
  }
  return parsed;
}
