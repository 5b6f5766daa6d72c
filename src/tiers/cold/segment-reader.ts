// Reading blocks back: refs are grouped by segment; each segment is opened once, its header checked and
// its data key unwrapped; runs of consecutive blocks are read by offset (never the whole segment: from a
// file, positional reads; from a blob store, ranged GETs, as many at once as the job limiter allows) and
// opened on the crypto threads against the refs' owners and checksums. Runs the storage stages (a
// directory's 4 KiB-multiple blocks read with O_DIRECT, a blob store's runs) land in staging slots and are
// decrypted there in place; a caller that takes each block as it arrives (deliver: the tiers copy it into
// the allocator's frame) sees it in the slot, any other gets a copy. Every failure is a FabricError naming the context;
// bytes that did not verify never reach the caller.

import { FabricError } from '../../fabric/errors';
import { blockAad, counterIv, TAG_BYTES } from './associated-data';
import { forEachBounded, Limiter } from './bounded-parallel';
import type { BlockReader, SegmentSource } from './cold-storage';
import type { OpenItem, OpenResult } from './crypto-pool';
import { ioError } from '../../blob-store/posix/io-errors';
import { HEADER_PROBE_BYTES, parseSegmentHeader, type SegmentGeometry, type SegmentHeader } from './segment-header';
import { blocksPerJob } from './segment-writer';
import { stagingArena } from './staging-arena';
import type { SegmentContext } from './segment-context';
import type { ColdBlockRef } from './types';

/** Segments open at once in one read; the store's read and job limiters bound the bytes in flight. */
const OPEN_SEGMENTS = 8;
const UNBOUNDED = new Limiter(Number.POSITIVE_INFINITY);

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
  const segment = await ctx.storage.openSegment(request.segmentId, where);
  if (segment === undefined) throw new FabricError('INTEGRITY', `${where}: segment file is missing from the cold tier`);
  try {
    const { header, geometry } = await readHeader(segment, where);
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
    try {
      const reader = await segment.blockReader(header.blockBytes);
      // Every run queued at once: the store's limits on reads and crypto jobs (readRun) bound what is in
      // flight. After a failure, runs not yet read are skipped.
      const failed = { now: false };
      await forEachBounded(runsOf(request, header.blockBytes), UNBOUNDED, (run) =>
        readRun(ctx, reader, run, header, geometry, unwrapped.dataKey, request, deliver, where, failed).catch((err: unknown) => {
          failed.now = true;
          throw err;
        }),
      );
    } finally {
      unwrapped.dataKey.fill(0);
    }
  } catch (err) {
    throw ioError(err, `${where}: reading`);
  } finally {
    await segment.close();
  }
}

async function readHeader(segment: SegmentSource, where: string): Promise<{ header: SegmentHeader; geometry: SegmentGeometry }> {
  const { size, start } = segment;
  const want = Math.min(HEADER_PROBE_BYTES, size);
  let probe: Buffer;
  if (start !== undefined && start.byteLength >= want) probe = start.subarray(0, want);
  else {
    probe = Buffer.alloc(want);
    probe = probe.subarray(0, want === 0 ? 0 : await segment.read(probe, 0));
  }
  let parsed = parseSegmentHeader(probe, size, where);
  if (!parsed.complete) {
    const whole = Buffer.alloc(parsed.headerBytes);
    if ((await segment.read(whole, 0)) < whole.length)
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
  reader: BlockReader,
  run: number[],
  header: SegmentHeader,
  geometry: SegmentGeometry,
  dataKey: Buffer,
  request: SegmentRequest,
  deliver: DeliverBlock,
  where: string,
  failed: { readonly now: boolean },
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
  // Staged: ciphertext read into a staging slot and decrypted there; the blocks are handed over before
  // the slot is recycled. Otherwise one fresh buffer, decrypted in place. Hand over hand: the read slot is
  // held until a decrypt slot is, so reads go on while earlier runs decrypt, and no more runs are staged
  // than both limits allow.
  const releaseRead = await ctx.reads.acquire();
  if (failed.now) return releaseRead();
  let releaseDecrypt: (() => void) | undefined;
  const slot = reader.staged ? await stagingArena.take() : undefined;
  try {
    const sealed = slot?.bytes.subarray(0, runBytes) ?? new Uint8Array(runBytes);
    const got = await reader.read(sealed, geometry.dataOffset + first * blockBytes);
    if (got < runBytes)
      throw new FabricError('INTEGRITY', `${where}: file is truncated (block ${first + Math.floor(got / blockBytes)} is incomplete)`);
    releaseDecrypt = await ctx.decrypts.acquire();
    releaseRead();
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
    releaseDecrypt?.();
    releaseRead();
  }
}
