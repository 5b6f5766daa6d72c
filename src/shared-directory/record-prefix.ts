// Where one kind of record lives in the shared blob store: under a key prefix ("grants/"), in a POSIX
// directory and an S3 bucket alike. On a POSIX store the prefix is a folder of the tier directory, whose
// mode is what keeps other users of the machine or the mount from listing agent ids, or from planting and
// deleting records, so it is opened as a private directory (created 0700, an existing one checked and
// refused when others can write it) and cleared of temp files its crashed writers left. A bucket has no
// such owner: its policy keeps others out (docs/operations.md), and the seal refuses what they put.
import { promises as fsp } from 'node:fs';
import path from 'node:path';

import { checkPrefix, isKey } from '../blob-store/blob-keys';
import type { BlobStore } from '../blob-store/blob-store';
import { PosixBlobStore } from '../blob-store/posix/posix-blob-store';
import { errnoOf, ioError } from '../blob-store/posix/io-errors';
import { openPrivateDirectory } from '../blob-store/posix/private-directory';
import { removeStaleTempFilesIn, STALE_TEMP_AGE_MS } from '../blob-store/posix/temp-files';
import { FabricError } from '../fabric/errors';

const FILE_URL = 'file://';

/**
 * Checks `prefix` (empty, or key segments ending in "/": INVALID_ARGUMENT otherwise) and, on a POSIX
 * store, opens its folder as above; `what` names it in errors ("the grant directory"). Returns `prefix`.
 */
export async function openRecordPrefix(store: BlobStore, prefix: string, what: string): Promise<string> {
  if (typeof prefix !== 'string' || (prefix !== '' && !prefix.endsWith('/'))) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `a record prefix is empty or ends with "/", got ${JSON.stringify(String(prefix).slice(0, 80))}`,
    );
  }
  checkPrefix(prefix);
  const folder = posixFolderOf(store, prefix);
  if (folder !== undefined) {
    await openPrivateDirectory(folder, what);
    await removeStaleTempFilesIn(folder, STALE_TEMP_AGE_MS);
  }
  return prefix;
}

/**
 * The names in the POSIX folder of `prefix` that a key could have but that are no regular file (a link,
 * a FIFO, a device): planted, since the store never makes one, and left out of its listings. A reader
 * that takes the greatest listed entry as the value asks for them, so that one planted over the greatest
 * entry is INTEGRITY rather than a lower value. None on any other store.
 */
export async function plantedNonFiles(store: BlobStore, prefix: string): Promise<string[]> {
  const folder = posixFolderOf(store, prefix);
  if (folder === undefined) return [];
  try {
    const entries = await fsp.readdir(folder, { withFileTypes: true });
    return entries.filter((entry) => !entry.isFile() && !entry.isDirectory() && isKey(entry.name)).map((entry) => entry.name);
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return [];
    throw ioError(err, `listing ${folder}`);
  }
}

/** The folder of `prefix` when `store` is a POSIX directory. */
function posixFolderOf(store: BlobStore, prefix: string): string | undefined {
  if (!(store instanceof PosixBlobStore) || !store.location.startsWith(FILE_URL)) return undefined;
  // The store's location is file:// and its root, as it opened it (an absolute path, not URL-encoded).
  return path.join(store.location.slice(FILE_URL.length), ...prefix.split('/').filter((segment) => segment !== ''));
}
