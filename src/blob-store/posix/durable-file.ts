// Durable file primitives of the POSIX blob store and the shared directory: atomic replacement (temp file in the same directory, write,
// fsync, rename, fsync the directory) so a crash leaves the old file or the new one, never a torn one
// under the real name; and positional reads and writes that finish or fail, never stop short silently.

import { randomBytes } from 'node:crypto';
import { constants as fsConstants, promises as fsp } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';

import { FabricError } from '../../fabric/errors';
import { errnoOf, ioError } from './io-errors';
import { PRIVATE_FILE_MODE } from './private-directory';
import { tempFileName } from './temp-files';

/** Flags for a new temp file: exclusive create, write only, O_DIRECT when asked (see tiers/cold/direct-io.ts). */
export function newFileFlags(direct: boolean): number {
  const base = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL;
  return direct ? base | fsConstants.O_DIRECT : base;
}

/**
 * Creates `finalName` in `directory` with what `write` puts in a fresh temp file (opened with O_DIRECT
 * when `direct`: then every write must be aligned, see direct-io). On any failure the temp file is
 * removed and a prior file of that name is untouched. `what` describes the write for errors.
 */
export async function writeAtomically(
  directory: string,
  finalName: string,
  what: string,
  write: (file: FileHandle) => Promise<void>,
  options: { direct?: boolean } = {},
): Promise<void> {
  const tempPath = path.join(directory, tempFileName(randomBytes(6).toString('hex')));
  let file: FileHandle | undefined;
  try {
    // Owner-only: the content is encrypted, but nobody else needs to list or read it.
    file = await fsp.open(tempPath, newFileFlags(options.direct === true), 0o600);
    await write(file);
    await file.sync();
    const closing = file;
    file = undefined;
    await closing.close();
    await fsp.rename(tempPath, path.join(directory, finalName));
  } catch (err) {
    await file?.close().catch(() => undefined);
    await fsp.rm(tempPath, { force: true }).catch(() => undefined);
    throw ioError(err, what);
  }
  await syncDirectory(directory, what);
}

/**
 * Creates `target` once: `bytes` go to a fresh temp file in `directory`, synced, then linked to `target`
 * with link(2), which never replaces a file. True when this call created it; false when the name was
 * taken (by someone else first, or by this very link when NFS lost its reply: the caller reads what is
 * there). Other failures are thrown as they are; the temp file is gone either way. The caller makes the
 * link durable (syncDirectory) once it has decided.
 */
export async function createOnce(directory: string, target: string, bytes: string | Uint8Array): Promise<boolean> {
  const tempPath = path.join(directory, tempFileName(randomBytes(6).toString('hex')));
  try {
    const file = await fsp.open(tempPath, 'wx', PRIVATE_FILE_MODE);
    try {
      await file.writeFile(bytes);
      await file.sync();
    } finally {
      await file.close();
    }
    try {
      await fsp.link(tempPath, target);
    } catch (err) {
      if (errnoOf(err) === 'EEXIST') return false;
      throw err;
    }
    return true;
  } finally {
    await fsp.rm(tempPath, { force: true }).catch(() => undefined);
  }
}

/** Makes a rename or unlink in `directory` durable. */
export async function syncDirectory(directory: string, what: string): Promise<void> {
  let dir: FileHandle | undefined;
  try {
    dir = await fsp.open(directory, 'r');
    await dir.sync();
  } catch (err) {
    // Some file systems (and Windows) cannot open or fsync a directory; there the rename is as durable as it gets.
    const errno = errnoOf(err);
    if (errno !== 'EISDIR' && errno !== 'EINVAL' && errno !== 'EPERM' && errno !== 'ENOTSUP' && errno !== 'EBADF') throw ioError(err, what);
  } finally {
    await dir?.close().catch(() => undefined);
  }
}

export async function writeFully(file: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < bytes.byteLength) {
    const { bytesWritten } = await file.write(bytes, done, bytes.byteLength - done, position + done);
    if (bytesWritten <= 0) throw new FabricError('UNAVAILABLE', 'the file system accepted no bytes of a write');
    done += bytesWritten;
  }
}

/** Fills `into` from `position`; returns the bytes read, fewer only at end of file. */
export async function readFully(file: FileHandle, into: Uint8Array, position: number): Promise<number> {
  let done = 0;
  while (done < into.byteLength) {
    const { bytesRead } = await file.read(into, done, into.byteLength - done, position + done);
    if (bytesRead === 0) break;
    done += bytesRead;
  }
  return done;
}
