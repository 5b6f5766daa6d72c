// Opening a file of the shared tier directory (a manifest, a segment, a record) for reading, when others
// may have put something else in its place: a FIFO (a blocking open waits for a writer forever, and holds
// one of libuv's few threads while it does), a device (/dev/zero never ends), a socket or a link to any
// of them. Opened with O_NOFOLLOW, since none of these files is a link, and O_NONBLOCK, so a FIFO opens at
// once; then the descriptor itself must be a regular file no larger than its kind allows (fstat: the file
// checked is the file read, whatever the path names meanwhile). INTEGRITY otherwise, before a byte is read.
import { type BigIntStats, constants as fsConstants, promises as fsp } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';

import { FabricError } from '../../fabric/errors';
import { readFully } from './durable-file';
import { errnoOf, ioError } from './io-errors';

const CHECKED_FLAGS = (fsConstants.O_NOFOLLOW ?? 0) | (fsConstants.O_NONBLOCK ?? 0);
const READ_FLAGS = fsConstants.O_RDONLY | CHECKED_FLAGS;
const APPEND_FLAGS = fsConstants.O_WRONLY | fsConstants.O_APPEND | fsConstants.O_CREAT | CHECKED_FLAGS;

/** A file opened and checked: its handle, its size, and the stat of the very file opened. */
export interface OpenedFile {
  handle: FileHandle;
  size: number;
  stat: BigIntStats;
}

/**
 * `file` opened for reading, with its size and stat; undefined when there is no such file. INTEGRITY for a
 * link, anything but a regular file, or one over `maxBytes`; UNAVAILABLE for other failures. `what` names
 * the file in errors ("the manifest of context 'a'").
 */
export async function openRegularFile(file: string, what: string, maxBytes: number): Promise<OpenedFile | undefined> {
  return openChecked(file, READ_FLAGS, what, maxBytes);
}

/**
 * Appends `text` to `file` in one write (O_APPEND: concurrent appends never interleave), creating it with
 * `mode`; the same refusals as openRegularFile, nothing written.
 */
export async function appendToRegularFile(file: string, what: string, text: string, mode: number): Promise<void> {
  const opened = await openChecked(file, APPEND_FLAGS, what, Number.POSITIVE_INFINITY, mode);
  if (opened === undefined) throw new FabricError('UNAVAILABLE', `appending to ${what}: its folder is gone`);
  try {
    await opened.handle.write(text);
  } catch (err) {
    throw ioError(err, `appending to ${what}`);
  } finally {
    await opened.handle.close().catch(() => undefined);
  }
}

async function openChecked(file: string, flags: number, what: string, maxBytes: number, mode?: number): Promise<OpenedFile | undefined> {
  let handle: FileHandle;
  try {
    handle = await fsp.open(file, flags, mode);
  } catch (err) {
    const errno = errnoOf(err);
    if (errno === 'ENOENT') return undefined;
    // ELOOP: a link where no link belongs. ENXIO: a socket (or a device without its driver), or a FIFO
    // opened for writing that nobody reads.
    if (errno === 'ELOOP' || errno === 'ENXIO') throw new FabricError('INTEGRITY', `${what} is not a regular file (${errno}): planted`);
    throw ioError(err, `opening ${what}`);
  }
  try {
    const stat = await handle.stat({ bigint: true });
    const size = Number(stat.size);
    if (!stat.isFile()) throw new FabricError('INTEGRITY', `${what} is not a regular file: planted`);
    if (size > maxBytes)
      throw new FabricError('INTEGRITY', `${what} is implausibly large (${size} bytes, at most ${maxBytes} for its kind)`);
    return { handle, size, stat };
  } catch (err) {
    await handle.close().catch(() => undefined);
    throw ioError(err, `opening ${what}`);
  }
}

/**
 * The whole of `file` (see openRegularFile), with the stat of the very file read (not of whatever the path
 * names before or after); undefined when there is no such file.
 */
export async function readRegularFile(
  file: string,
  what: string,
  maxBytes: number,
): Promise<{ bytes: Buffer; stat: BigIntStats } | undefined> {
  const opened = await openRegularFile(file, what, maxBytes);
  if (opened === undefined) return undefined;
  try {
    const bytes = Buffer.alloc(opened.size);
    // Fewer bytes only if the file shrank meanwhile: what is read must then authenticate as it is.
    const got = await readFully(opened.handle, bytes, 0);
    return { bytes: got === bytes.length ? bytes : bytes.subarray(0, got), stat: opened.stat };
  } catch (err) {
    throw ioError(err, `reading ${what}`);
  } finally {
    await opened.handle.close().catch(() => undefined);
  }
}
