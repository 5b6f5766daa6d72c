// Reading blocks back: refs are grouped by segment; each segment file is opened once, its header checked
// and its data key unwrapped; runs of consecutive blocks are read with positional reads (never the whole
// file) and opened on the crypto threads against the refs' owners and checksums. Runs of 4 KiB-multiple
// blocks are read with O_DIRECT into staging slots (no page-cache copy or upkeep) and decrypted there in
// place; a caller that takes each block as it arrives (deliver: the tiers copy it into the allocator's
// frame) sees it in the slot, any other gets a copy. Every failure is a FabricError naming the context;
// bytes that did not verify never reach the caller.

import { constants as fsConstants, promises as fsp } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';

import { FabricError } from '../../fabric/errors';
import { blockAad, counterIv, TAG_BYTES } from './associated-data';
import { forEachBounded, Limiter } from './bounded-parallel';
import { segmentFileName } from './cold-directory';
import type { OpenItem, OpenResult } from './crypto-pool';
import { directIoFits } from './direct-io';
import { readFully } from '../../blob-store/posix/durable-file';
import { ioError } from '../../blob-store/posix/io-errors';
import { openRegularFile } from '../../blob-store/posix/regular-file';
import { HEADER_PROBE_BYTES, parseSegmentHeader, type SegmentGeometry, type SegmentHeader } from './segment-header';
import { blocksPerJob } from './segment-writer';
import { stagingArena } from './staging-arena';
import type { SegmentContext } from './segment-context';
import type { ColdBlockRef } from './types';

/** Segment files open at once in one read; the job limiter bounds the bytes in flight. */
const OPEN_SEGMENTS = 8;
/** The second handle a direct read uses: like openRegularFile's, never through a link nor blocking on a FIFO. */
const DIRECT_READ_FLAGS = fsConstants.O_RDONLY | fsConstants.O_DIRECT | (fsConstants.O_NOFOLLOW ?? 0) | (fsConstants.O_NONBLOCK ?? 0);

/** Where a run's ciphertext is read from: the plain handle, or an O_DIRECT one into staging slots. */
interface DataSource {
  file: FileHandle;
  direct: boolean;
}

/** The refs of one segment in a read, deduplicated by block index. */
interface SegmentRequest {
  segmentId: string;
  /** Block index -> the first ref naming it and every position in the caller's array that wants it. */
  blocks: Map<number, { ref: ColdBlockRef; positions: number[] }>;
}

function sameRef(a: ColdBlockRef, b: ColdBlockRef): boolean {
  return (
    a.checksum === b.checksum &&
    a.owner.tenant === b.owner.tenant &&
    a.owner.contextId === b.owner.contextId &&
    a.owner.version === b.owner.version
  );
}

function groupBySegment(refs: ColdBlockRef[]): SegmentRequest[] {
  const segments = new Map<string, SegmentRequest>();
  refs.forEach((ref, position) => {
    let request = segments.get(ref.segmentId);
    if (request === undefined) segments.set(ref.segmentId, (request = { segmentId: ref.segmentId, blocks: new Map() }));
    const known = request.blocks.get(ref.index);
    if (known === undefined) {
      request.blocks.set(ref.index, { ref, positions: [position] });
    } else if (sameRef(known.ref, ref)) {
      known.positions.push(position);
    } else {
      throw new FabricError(
        'INVALID_ARGUMENT',
        `refs[${known.positions[0]}] and refs[${position}] name block ${ref.index} of segment ${ref.segmentId} ` +
          'with different owners or checksums',
      );
    }
  });
  return [...segments.values()];
}

/**
 * Gets block `position` of the refs: `bytes` are valid only during the call (a staging slot, recycled
 * after), verified, and exactly one block long.
 */
export type DeliverBlock = (position: number, bytes: Uint8Array) => void;

/** Validated refs only (cold-store checks them and the tenant). Hands over each block as it is verified. */
export async function readBlocks(ctx: SegmentContext, refs: ColdBlockRef[], deliver: DeliverBlock): Promise<void> {
  await forEachBounded(groupBySegment(refs), new Limiter(OPEN_SEGMENTS), (request) => readSegmentBlocks(ctx, request, deliver));
}

async function readSegmentBlocks(ctx: SegmentContext, request: SegmentRequest, deliver: DeliverBlock): Promise<void> {
  const firstRef = request.blocks.values().next().value!.ref;
  const where = `context '${firstRef.owner.contextId}' (version ${firstRef.owner.version}): segment ${request.segmentId}`;
  // No cap here: the header states the file's exact size, checked before any block is read.
  const opened = await openRegularFile(segmentPath(ctx, request.segmentId), `${where}: segment file`, Number.MAX_SAFE_INTEGER);
  if (opened === undefined) throw new FabricError('INTEGRITY', `${where}: segment file is missing from the cold tier`);
  const file = opened.handle;
  try {
    const { header, geometry } = await readHeader(file, where);
    checkSegmentMatches(header, request, where);
    const unwrapped = ctx.keyRing.unwrapDataKey(header.keyId, header.wrappedKey);
    if (!unwrapped.ok) {
      if (unwrapped.reason === 'unknown-key') {
        throw new FabricError(
          'PERMISSION_DENIED',
          `${where}: its data key is wrapped with master key '${header.keyId}', ` +
            `which is not in this key ring (${ctx.keyRing.keyIds.join(', ')})`,
        );
      }
      throw new FabricError(
        'INTEGRITY',
        `${where}: its data key does not unwrap with master key '${header.keyId}' ` +
          `(header tampered or key '${header.keyId}' is not the one it was written with)`,
      );
    }
    const source = await dataSource(ctx, request.segmentId, file, header.blockBytes);
    try {
      await forEachBounded(runsOf(request, header.blockBytes), ctx.jobs, (run) =>
        readRun(ctx, source, run, header, geometry, unwrapped.dataKey, request, deliver, where),
      );
    } finally {
      unwrapped.dataKey.fill(0);
      if (source.file !== file) await source.file.close().catch(() => undefined);
    }
  } catch (err) {
    throw ioError(err, `${where}: reading`);
  } finally {
    await file.close().catch(() => undefined);
  }
}

async function dataSource(ctx: SegmentContext, segmentId: string, file: FileHandle, blockBytes: number): Promise<DataSource> {
  if (!ctx.directIo || !directIoFits(blockBytes)) return { file, direct: false };
  let direct: FileHandle | undefined;
  try {
    direct = await fsp.open(segmentPath(ctx, segmentId), DIRECT_READ_FLAGS);
    // The path opened again: it must still be the very file checked and read so far, not one put there since.
    const [checked, reopened] = await Promise.all([file.stat(), direct.stat()]);
    if (reopened.isFile() && reopened.dev === checked.dev && reopened.ino === checked.ino) return { file: direct, direct: true };
  } catch {
    // No O_DIRECT here after all: the plain handle reads the same bytes.
  }
  await direct?.close().catch(() => undefined);
  return { file, direct: false };
}

function segmentPath(ctx: SegmentContext, segmentId: string): string {
  return path.join(ctx.directory.segments, segmentFileName(segmentId));
}

async function readHeader(file: FileHandle, where: string): Promise<{ header: SegmentHeader; geometry: SegmentGeometry }> {
  const { size } = await file.stat();
  const probe = Buffer.alloc(Math.min(HEADER_PROBE_BYTES, size));
  const got = await readFully(file, probe, 0);
  let parsed = parseSegmentHeader(probe.subarray(0, got), size, where);
  if (!parsed.complete) {
    const whole = Buffer.alloc(parsed.headerBytes);
    if ((await readFully(file, whole, 0)) < whole.length)
      throw new FabricError('INTEGRITY', `${where}: file is truncated (shorter than its header)`);
    parsed = parseSegmentHeader(whole, size, where);
    if (!parsed.complete) throw new FabricError('INTEGRITY', `${where}: segment header is corrupted`);
  }
  return parsed;
}

/** Early, readable diagnoses of a swapped or renamed file; the tags would reject it regardless. */
function checkSegmentMatches(header: SegmentHeader, request: SegmentRequest, where: string): void {
  if (header.segmentId.toString('hex') !== request.segmentId) {
    throw new FabricError('INTEGRITY', `${where}: the file holds segment ${header.segmentId.toString('hex')} (renamed or swapped)`);
  }
  for (const { ref } of request.blocks.values()) {
    const owner = header.owner;
    if (owner.tenant !== ref.owner.tenant || owner.contextId !== ref.owner.contextId || owner.version !== ref.owner.version) {
      throw new FabricError(
        'INTEGRITY',
        `${where}: the file holds blocks of context '${owner.contextId}' (tenant ${owner.tenant}, version ${owner.version}), ` +
          `not of context '${ref.owner.contextId}' (tenant ${ref.owner.tenant}, version ${ref.owner.version}): swapped or replaced`,
      );
    }
    if (ref.index >= header.blockCount)
      throw new FabricError('INTEGRITY', `${where}: block ${ref.index} is past the segment's ${header.blockCount} blocks`);
  }
}

/** Consecutive block indices, at most one job's worth each. */
function runsOf(request: SegmentRequest, blockBytes: number): number[][] {
  const perJob = blocksPerJob(blockBytes);
  const indices = [...request.blocks.keys()].sort((a, b) => a - b);
  const runs: number[][] = [];
  let run: number[] = [];
  for (const index of indices) {
    if (run.length > 0 && (index !== run[run.length - 1]! + 1 || run.length === perJob)) {
      runs.push(run);
      run = [];
    }
    run.push(index);
  }
  if (run.length > 0) runs.push(run);
  return runs;
}

async function readRun(
  ctx: SegmentContext,
  source: DataSource,
  run: number[],
  header: SegmentHeader,
  geometry: SegmentGeometry,
  dataKey: Buffer,
  request: SegmentRequest,
  deliver: DeliverBlock,
  where: string,
): Promise<void> {
  const { blockBytes } = header;
  const first = run[0]!;
  const runBytes = run.length * blockBytes;
  const items: OpenItem[] = run.map((index, i) => {
    const { ref } = request.blocks.get(index)!;
    return {
      offset: i * blockBytes,
      length: blockBytes,
      iv: counterIv(index),
      aad: blockAad(header.segmentId, index, blockBytes, ref.owner),
      // A copy: a view would send the whole tag table with every job.
      tag: new Uint8Array(header.tags.subarray(TAG_BYTES * index, TAG_BYTES * (index + 1))),
      checksum: ref.checksum,
    };
  });
  // Direct: ciphertext read into a staging slot and decrypted there; the blocks are handed over before
  // the slot is recycled. Otherwise one fresh buffer, decrypted in place.
  const slot = source.direct ? await stagingArena.take() : undefined;
  try {
    const sealed = slot?.bytes.subarray(0, runBytes) ?? new Uint8Array(runBytes);
    const got = await readFully(source.file, sealed, geometry.dataOffset + first * blockBytes);
    if (got < runBytes)
      throw new FabricError('INTEGRITY', `${where}: file is truncated (block ${first + Math.floor(got / blockBytes)} is incomplete)`);
    const opened: OpenResult = await ctx.crypto.open(dataKey, sealed, items);
    if (opened.failedItem >= 0) {
      const index = run[opened.failedItem]!;
      throw new FabricError(
        'INTEGRITY',
        opened.failure === 'checksum'
          ? `${where}: block ${index} decrypted but its CRC-32 differs from the manifest's checksum`
          : `${where}: block ${index} failed authentication (corrupted, or moved from another context, block or version)`,
      );
    }
    run.forEach((index, i) => {
      const block = opened.plaintext.subarray(i * blockBytes, (i + 1) * blockBytes);
      for (const position of request.blocks.get(index)!.positions) deliver(position, block);
    });
  } finally {
    if (slot !== undefined) stagingArena.give(slot);
  }
}
