// O_DIRECT for segment block I/O: the page cache copy costs as much CPU as AES-GCM on small machines, and
// a demoted context is not read back soon, so caching it only evicts hotter data. Used when the platform
// has O_DIRECT, the directory's file system accepts it (probed once at open), and every transfer of a
// segment is aligned: blocks of whole 4 KiB multiples that fit a staging slot (the header region is
// padded to 4 KiB anyway).

import { constants as fsConstants, promises as fsp } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';

import { newFileFlags } from '../../blob-store/posix/durable-file';
import { tempFileName } from '../../blob-store/posix/temp-files';
import { SLOT_BYTES, stagingArena, type StagingSlot } from './staging-arena';

/** File offsets, lengths and buffer addresses of direct writes are multiples of this. */
export const DIRECT_IO_ALIGNMENT = 4096;

/** Whether blocks of this size can move with O_DIRECT (given a file system that takes it). */
export function directIoFits(blockBytes: number): boolean {
  return blockBytes % DIRECT_IO_ALIGNMENT === 0 && blockBytes <= SLOT_BYTES;
}

/** Whether an aligned O_DIRECT write and read work in `folder`. Any failure means no, and leaves nothing behind. */
export async function directIoWorks(folder: string): Promise<boolean> {
  if (!fsConstants.O_DIRECT) return false;
  const file = path.join(folder, tempFileName(`probe${process.hrtime.bigint().toString(16)}`));
  let handle: FileHandle | undefined;
  let slot: StagingSlot | undefined;
  try {
    slot = await stagingArena.take();
    const aligned = slot.bytes.subarray(0, DIRECT_IO_ALIGNMENT);
    handle = await fsp.open(file, newFileFlags(true), 0o600);
    const { bytesWritten } = await handle.write(aligned, 0, DIRECT_IO_ALIGNMENT, 0);
    await handle.close();
    handle = await fsp.open(file, fsConstants.O_RDONLY | fsConstants.O_DIRECT);
    const { bytesRead } = await handle.read(aligned, 0, DIRECT_IO_ALIGNMENT, 0);
    return bytesWritten === DIRECT_IO_ALIGNMENT && bytesRead === DIRECT_IO_ALIGNMENT;
  } catch {
    return false;
  } finally {
    if (slot !== undefined) stagingArena.give(slot);
    await handle?.close().catch(() => undefined);
    await fsp.rm(file, { force: true }).catch(() => undefined);
  }
}
