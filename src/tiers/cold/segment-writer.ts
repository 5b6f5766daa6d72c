// Writing one segment: blocks are copied into shared staging slots (by the source: the tiers copy straight
// from the allocator's frames), sealed in place on the crypto threads (AES-256-GCM under a fresh data key,
// CRC-32 of the plaintext on the way unless the reader checks the bytes itself), and written at their final
// offsets of the segment while later blocks are still being sealed; the header with the tag table goes
// last, then the storage makes the segment visible whole (a directory: durable and renamed into place;
// a blob store: one create-only put).

import { randomBytes } from 'node:crypto';

import { blockAad, counterIv, TAG_BYTES } from './associated-data';
import { forEachBounded } from './bounded-parallel';
import type { SegmentSink } from './cold-storage';
import type { SealItem } from './crypto-pool';
import { directIoFits } from './direct-io';
import { newDataKey } from './key-ring';
import { encodeSegmentHeader, segmentGeometry } from './segment-header';
import { SLOT_BYTES, stagingArena } from './staging-arena';
import type { SegmentContext } from './segment-context';
import type { BlockSource, ColdBlockRef, SegmentOwner } from './types';

/** Target bytes per crypto job and disk transfer: one staging slot, big enough for sequential disk I/O. */
export const JOB_BYTES = SLOT_BYTES;
/** Keeps job messages small for tiny blocks (each block is one item with its own IV and associated data). */
export const MAX_BLOCKS_PER_JOB = 1024;

export function blocksPerJob(blockBytes: number): number {
  return Math.min(MAX_BLOCKS_PER_JOB, Math.max(1, Math.floor(JOB_BYTES / blockBytes)));
}

/** Validated inputs only (cold-store checks them). Returns one ref per block, in order. */
export async function writeSegment(
  ctx: SegmentContext,
  owner: SegmentOwner,
  blocks: BlockSource,
  plaintextChecksums: boolean,
): Promise<ColdBlockRef[]> {
  const { blockBytes } = blocks;
  const segmentIdBytes = randomBytes(16);
  const segmentId = segmentIdBytes.toString('hex');
  const dataKey = newDataKey();
  const { keyId, wrapped } = ctx.keyRing.wrapDataKey(dataKey);
  const { dataOffset, fileBytes } = segmentGeometry(keyId, owner.contextId, blocks.count, blockBytes);
  const tags = Buffer.alloc(TAG_BYTES * blocks.count);
  const checksums = new Uint32Array(blocks.count);
  // Blocks bigger than a slot travel to the crypto threads as their own ArrayBuffers, buffered.
  const staged = blockBytes <= SLOT_BYTES;
  const perJob = blocksPerJob(blockBytes);
  const jobStarts: number[] = [];
  for (let first = 0; first < blocks.count; first += perJob) jobStarts.push(first);

  const sealAndWrite = async (sink: SegmentSink, first: number) => {
    const count = Math.min(perJob, blocks.count - first);
    const slot = staged ? await stagingArena.take() : undefined;
    try {
      const plain = slot?.bytes.subarray(0, count * blockBytes) ?? new Uint8Array(count * blockBytes);
      const items: SealItem[] = [];
      for (let i = 0; i < count; i++) {
        blocks.copy(first + i, plain.subarray(i * blockBytes, (i + 1) * blockBytes));
        items.push({
          offset: i * blockBytes,
          length: blockBytes,
          iv: counterIv(first + i),
          aad: blockAad(segmentIdBytes, first + i, blockBytes, owner),
        });
      }
      const sealed = await ctx.crypto.seal(dataKey, plain, items, plaintextChecksums);
      tags.set(sealed.tags, TAG_BYTES * first);
      if (sealed.checksums) checksums.set(sealed.checksums, first);
      await sink.write(sealed.bytes, dataOffset + first * blockBytes);
    } finally {
      if (slot !== undefined) stagingArena.give(slot);
    }
  };

  const what = `writing segment ${segmentId} of context '${owner.contextId}' (version ${owner.version})`;
  try {
    await ctx.storage.writeSegment(segmentId, fileBytes, what, directIoFits(blockBytes), async (sink) => {
      await forEachBounded(jobStarts, ctx.jobs, (first) => sealAndWrite(sink, first));
      const header = encodeSegmentHeader({
        segmentId: segmentIdBytes,
        blockCount: blocks.count,
        blockBytes,
        owner,
        keyId,
        wrappedKey: wrapped,
        tags,
      });
      if (!sink.direct) {
        await sink.write(header, 0);
        return;
      }
      // A direct write covers whole aligned pages: the header and its zero padding up to the data.
      const slot = await stagingArena.take();
      try {
        const region = slot.bytes.subarray(0, dataOffset);
        region.fill(0);
        region.set(header);
        await sink.write(region, 0);
      } finally {
        stagingArena.give(slot);
      }
    });
  } finally {
    dataKey.fill(0);
  }
  return Array.from({ length: blocks.count }, (_, index) => ({
    segmentId,
    index,
    owner: { ...owner },
    ...(plaintextChecksums ? { checksum: checksums[index]! } : {}),
  }));
}
