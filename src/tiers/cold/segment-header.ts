// The versioned binary header of a segment file (layout in docs/cold-tier.md, "Segment file"). It holds
// what a reader needs to find, unwrap and check blocks; its own CRC-32 separates a damaged header
// (INTEGRITY) from a key this ring lacks (PERMISSION_DENIED). The owner fields are for diagnostics and
// tools: decryption binds the owner from the reader's refs, never from here.

import { crc32 } from 'node:zlib';

import { FabricError } from '../../fabric/errors';
import { TAG_BYTES } from './associated-data';
import { WRAPPED_KEY_BYTES } from './key-ring';
import type { SegmentOwner } from './types';
import { MAX_BLOCK_BYTES, MAX_CONTEXT_ID_BYTES, MAX_SEGMENT_BLOCKS } from './validation';

export const SEGMENT_MAGIC = Buffer.from('KVFCSEG\0', 'latin1');
export const SEGMENT_FORMAT_VERSION = 1;
/** Block data starts on a 4 KiB boundary, so block reads and writes stay page aligned. */
export const DATA_ALIGNMENT = 4096;
/** Enough to hold a whole header of up to 240 blocks, so most reads need one header read. */
export const HEADER_PROBE_BYTES = DATA_ALIGNMENT;

const FIXED_BYTES = 98;
const MAX_KEY_ID_BYTES = 128;
const MAX_HEADER_BYTES = FIXED_BYTES + MAX_KEY_ID_BYTES + MAX_CONTEXT_ID_BYTES + TAG_BYTES * MAX_SEGMENT_BLOCKS + 4;
const OFFSET = {
  version: 8,
  keyIdLength: 10,
  headerBytes: 12,
  dataOffset: 16,
  blockCount: 20,
  blockBytes: 24,
  tenant: 28,
  ownerVersion: 32,
  segmentId: 40,
  wrappedKey: 56,
  contextIdLength: 96,
} as const;

export interface SegmentHeader {
  /** The segment id's 16 raw bytes. */
  segmentId: Buffer;
  blockCount: number;
  blockBytes: number;
  owner: SegmentOwner;
  keyId: string;
  wrappedKey: Buffer;
  /** blockCount GCM tags of 16 bytes, in block order. */
  tags: Buffer;
}

export interface SegmentGeometry {
  headerBytes: number;
  dataOffset: number;
  fileBytes: number;
}

export function segmentGeometry(keyId: string, contextId: string, blockCount: number, blockBytes: number): SegmentGeometry {
  const headerBytes = FIXED_BYTES + Buffer.byteLength(keyId) + Buffer.byteLength(contextId) + TAG_BYTES * blockCount + 4;
  const dataOffset = Math.ceil(headerBytes / DATA_ALIGNMENT) * DATA_ALIGNMENT;
  return { headerBytes, dataOffset, fileBytes: dataOffset + blockCount * blockBytes };
}

export function encodeSegmentHeader(header: SegmentHeader): Buffer {
  const keyId = Buffer.from(header.keyId, 'utf8');
  const contextId = Buffer.from(header.owner.contextId, 'utf8');
  const { headerBytes, dataOffset } = segmentGeometry(header.keyId, header.owner.contextId, header.blockCount, header.blockBytes);
  const out = Buffer.alloc(headerBytes);
  SEGMENT_MAGIC.copy(out, 0);
  out.writeUInt16BE(SEGMENT_FORMAT_VERSION, OFFSET.version);
  out.writeUInt16BE(keyId.length, OFFSET.keyIdLength);
  out.writeUInt32BE(headerBytes, OFFSET.headerBytes);
  out.writeUInt32BE(dataOffset, OFFSET.dataOffset);
  out.writeUInt32BE(header.blockCount, OFFSET.blockCount);
  out.writeUInt32BE(header.blockBytes, OFFSET.blockBytes);
  out.writeUInt32BE(header.owner.tenant, OFFSET.tenant);
  out.writeBigUInt64BE(BigInt(header.owner.version), OFFSET.ownerVersion);
  header.segmentId.copy(out, OFFSET.segmentId);
  header.wrappedKey.copy(out, OFFSET.wrappedKey);
  out.writeUInt16BE(contextId.length, OFFSET.contextIdLength);
  let at = FIXED_BYTES;
  at += keyId.copy(out, at);
  at += contextId.copy(out, at);
  at += header.tags.copy(out, at);
  out.writeUInt32BE(crc32(out.subarray(0, at)), at);
  return out;
}

export type HeaderProbe = { complete: true; header: SegmentHeader; geometry: SegmentGeometry } | { complete: false; headerBytes: number };

/**
 * Parses the header from the file's first bytes. When `bytes` holds only part of it, says how many bytes
 * the header has so the caller can read them all. `where` names the file and context in INTEGRITY errors.
 */
export function parseSegmentHeader(bytes: Buffer, fileBytes: number, where: string): HeaderProbe {
  const corrupt = (why: string): never => {
    throw new FabricError('INTEGRITY', `${where}: ${why}`);
  };
  if (bytes.length < FIXED_BYTES) corrupt(`file is truncated (${fileBytes} bytes, shorter than a segment header)`);
  if (!bytes.subarray(0, SEGMENT_MAGIC.length).equals(SEGMENT_MAGIC)) corrupt('not a kvfabric segment file (bad magic)');
  const headerBytes = bytes.readUInt32BE(OFFSET.headerBytes);
  if (headerBytes < FIXED_BYTES + 4 || headerBytes > MAX_HEADER_BYTES) corrupt('segment header is corrupted (impossible header length)');
  if (headerBytes > fileBytes) corrupt(`file is truncated (${fileBytes} bytes, the header alone has ${headerBytes})`);
  if (bytes.length < headerBytes) return { complete: false, headerBytes };

  if (crc32(bytes.subarray(0, headerBytes - 4)) !== bytes.readUInt32BE(headerBytes - 4))
    corrupt('segment header is corrupted (CRC mismatch)');
  const version = bytes.readUInt16BE(OFFSET.version);
  if (version !== SEGMENT_FORMAT_VERSION)
    corrupt(`segment format version ${version} is not supported (this build reads ${SEGMENT_FORMAT_VERSION})`);

  const keyIdLength = bytes.readUInt16BE(OFFSET.keyIdLength);
  const contextIdLength = bytes.readUInt16BE(OFFSET.contextIdLength);
  const blockCount = bytes.readUInt32BE(OFFSET.blockCount);
  const blockBytes = bytes.readUInt32BE(OFFSET.blockBytes);
  const dataOffset = bytes.readUInt32BE(OFFSET.dataOffset);
  const ownerVersion = bytes.readBigUInt64BE(OFFSET.ownerVersion);
  const tenant = bytes.readUInt32BE(OFFSET.tenant);
  // A matching CRC with inconsistent fields means a writer we do not understand, not a bit flip.
  const sane =
    keyIdLength >= 1 &&
    keyIdLength <= MAX_KEY_ID_BYTES &&
    contextIdLength >= 1 &&
    contextIdLength <= MAX_CONTEXT_ID_BYTES &&
    blockCount >= 1 &&
    blockCount <= MAX_SEGMENT_BLOCKS &&
    blockBytes >= 1 &&
    blockBytes <= MAX_BLOCK_BYTES &&
    tenant >= 1 &&
    ownerVersion <= BigInt(Number.MAX_SAFE_INTEGER) &&
    headerBytes === FIXED_BYTES + keyIdLength + contextIdLength + TAG_BYTES * blockCount + 4 &&
    dataOffset === Math.ceil(headerBytes / DATA_ALIGNMENT) * DATA_ALIGNMENT;
  if (!sane) corrupt('segment header fields are inconsistent');

  const expectedFileBytes = dataOffset + blockCount * blockBytes;
  if (fileBytes !== expectedFileBytes) {
    corrupt(
      `file is ${fileBytes < expectedFileBytes ? 'truncated' : 'longer than its header says'} ` +
        `(${fileBytes} bytes, header says ${expectedFileBytes})`,
    );
  }
  let at = FIXED_BYTES;
  const keyId = bytes.toString('utf8', at, (at += keyIdLength));
  const contextId = bytes.toString('utf8', at, (at += contextIdLength));
  const tags = Buffer.from(bytes.subarray(at, at + TAG_BYTES * blockCount));
  return {
    complete: true,
    header: {
      segmentId: Buffer.from(bytes.subarray(OFFSET.segmentId, OFFSET.segmentId + 16)),
      blockCount,
      blockBytes,
      owner: { tenant, contextId, version: Number(ownerVersion) },
      keyId,
      wrappedKey: Buffer.from(bytes.subarray(OFFSET.wrappedKey, OFFSET.wrappedKey + WRAPPED_KEY_BYTES)),
      tags,
    },
    geometry: { headerBytes, dataOffset, fileBytes: expectedFileBytes },
  };
}
