// The blob store as a POSIX directory (file://), possibly a mount several processes share: a key is a file
// path under the root. Every write goes to a synced temp file in the key's folder, then: a create-only
// put links it to the key (link(2) fails on an existing name, atomically); any other is renamed over the
// key while holding a claim of the key's current version (version-claims.ts: the compare of
// compare-and-swap, across processes); then the folder is synced: a crash leaves the old blob or the new one, never a torn
// one. Files are read with O_NOFOLLOW and checked to be regular files (regular-file.ts), so a link, FIFO
// or device planted under a key is INTEGRITY, never followed or blocked on.
import { randomBytes } from 'node:crypto';
import { promises as fsp, type BigIntStats, type Dirent } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';

import { FabricError, isFabricError } from '../../fabric/errors';
import { PreconditionFailed } from '../blob-errors';
import { checkBytes, checkCondition, checkKey, checkPrefix, checkRange, isKey } from '../blob-keys';
import type { BlobCondition, BlobHead, BlobRead, BlobStore, BlobVersion, ByteRange } from '../blob-store';
import { readFully, syncDirectory, writeFully } from './durable-file';
import { versionOf } from './file-version';
import { errnoOf, ioError } from './io-errors';
import { openPrivateDirectory, PRIVATE_DIRECTORY_MODE, PRIVATE_FILE_MODE } from './private-directory';
import { openRegularFile } from './regular-file';
import { tempFileName } from './temp-files';
import { claimVersion } from './version-claims';

/** The claimed "version" of a key that has no file. */
const ABSENT = 'absent';

export class PosixBlobStore implements BlobStore {
  readonly location: string;

  private constructor(private readonly root: string) {
    this.location = `file://${root}`;
  }

  /**
   * Opens (creating it 0700 when missing) the directory `root`; see private-directory.ts for the checks.
   * `rootAsIs`: an existing root only has to be a directory, its owner and mode left as they are: a shared
   * tier directory may be a mount point the operator owns (even 1777), and the folders below it are what
   * their stores check (record-prefix.ts, the cold tier's cold-directory.ts).
   */
  static async open(root: string, options: { rootAsIs?: boolean } = {}): Promise<PosixBlobStore> {
    const resolved = path.resolve(root);
    if (options.rootAsIs === true) await openDirectoryAsIs(resolved);
    else await openPrivateDirectory(resolved, 'the blob directory');
    return new PosixBlobStore(resolved);
  }

  async put(key: string, bytes: Uint8Array, condition?: BlobCondition): Promise<BlobVersion> {
    checkKey(key);
    checkBytes(bytes);
    checkCondition(condition);
    const file = this.fileOf(key);
    const folder = path.dirname(file);
    await fsp.mkdir(folder, { recursive: true, mode: PRIVATE_DIRECTORY_MODE }).catch((err: unknown) => {
      // EEXIST: the folder's own name is a blob.
      throw errnoOf(err) === 'EEXIST' ? this.throughBlob(key) : this.errorOf(err, key, `creating the folder of blob ${key}`);
    });
    const temp = path.join(folder, tempFileName(randomBytes(6).toString('hex')));
    let handle: FileHandle | undefined;
    try {
      handle = await fsp.open(temp, 'wx', PRIVATE_FILE_MODE);
      await writeFully(handle, bytes, 0);
      await handle.sync();
      if (condition !== undefined && 'ifNoneMatch' in condition) return await this.createOnce(handle, temp, file, key);
      for (;;) {
        const expected =
          condition === undefined ? ((await this.head(key))?.version ?? ABSENT) : 'ifMatch' in condition ? condition.ifMatch : ABSENT;
        const stillAt = async () => (await this.versionOrAbsent(file, key)) === expected;
        const claim = await claimVersion(folder, path.basename(file), expected, stillAt);
        if (claim !== undefined) {
          let settled = false;
          try {
            if (await stillAt()) {
              await fsp.rename(temp, file);
              settled = true;
              await syncDirectory(folder, `writing blob ${key}`);
              // This write's own inode, as renamed: a later write may already have replaced the key.
              return versionOf(await handle.stat({ bigint: true }));
            }
            settled = true;
          } finally {
            await (settled ? claim.settled() : claim.abandoned());
          }
        }
        if (condition !== undefined) throw this.refusal(key, condition);
      }
    } catch (err) {
      throw this.errorOf(err, key, `writing blob ${key}`);
    } finally {
      await handle?.close().catch(() => undefined);
      await fsp.rm(temp, { force: true }).catch(() => undefined);
    }
  }

  /**
   * A create-only put: link(2) of the synced temp file to the key, which fails when the key exists,
   * atomically on the file server (NFS too), so it needs no claim and no stale-claim rule. The version is
   * read after the temp name is gone, since each link and unlink changes the inode's ctime.
   */
  private async createOnce(handle: FileHandle, temp: string, file: string, key: string): Promise<BlobVersion> {
    try {
      await fsp.link(temp, file);
    } catch (err) {
      if (errnoOf(err) === 'EEXIST') throw this.refusal(key, { ifNoneMatch: '*' });
      throw err;
    }
    await fsp.rm(temp, { force: true });
    await syncDirectory(path.dirname(file), `writing blob ${key}`);
    return versionOf(await handle.stat({ bigint: true }));
  }

  async get(key: string, range?: ByteRange): Promise<BlobRead | undefined> {
    checkKey(key);
    checkRange(range);
    const what = `blob ${key}`;
    const opened = await openRegularFile(this.fileOf(key), what, Number.MAX_SAFE_INTEGER).catch(async (err: unknown) => {
      // A folder of the path that is a blob (ENOTDIR): no such blob either.
      if (isFabricError(err, 'UNAVAILABLE') && (await this.statOf(this.fileOf(key), key)) === undefined) return undefined;
      throw err;
    });
    if (opened === undefined) return undefined;
    try {
      const version = versionOf(opened.stat);
      const offset = range?.offset ?? 0;
      const length = range?.length ?? opened.size;
      if (offset + length > opened.size) {
        throw new FabricError('OUT_OF_RANGE', `bytes ${offset}-${offset + length - 1} of ${what}, which has ${opened.size}`);
      }
      const bytes = Buffer.allocUnsafe(length);
      const got = await readFully(opened.handle, bytes, offset);
      if (got !== length) throw new FabricError('INTEGRITY', `${what} shrank while it was read: files here are never changed in place`);
      return { key, size: opened.size, version, bytes };
    } catch (err) {
      throw this.errorOf(err, key, `reading ${what}`);
    } finally {
      await opened.handle.close().catch(() => undefined);
    }
  }

  async head(key: string): Promise<BlobHead | undefined> {
    checkKey(key);
    const stat = await this.statOf(this.fileOf(key), key);
    return stat && { key, size: Number(stat.size), version: versionOf(stat) };
  }

  async list(prefix: string): Promise<BlobHead[]> {
    checkPrefix(prefix);
    const start = prefix.includes('/') ? prefix.slice(0, prefix.lastIndexOf('/')) : '';
    const heads: BlobHead[] = [];
    const walk = async (relative: string): Promise<void> => {
      let entries: Dirent[];
      try {
        entries = await fsp.readdir(path.join(this.root, relative), { withFileTypes: true });
      } catch (err) {
        if (errnoOf(err) === 'ENOENT' || errnoOf(err) === 'ENOTDIR') return;
        throw ioError(err, `listing blobs under ${prefix || '/'}`);
      }
      for (const entry of entries) {
        const key = relative === '' ? entry.name : `${relative}/${entry.name}`;
        // Temp files and claims (dot names), and files others put here under names no key has.
        if (!isKey(key)) continue;
        if (!key.startsWith(prefix) && !prefix.startsWith(`${key}/`)) continue;
        if (entry.isDirectory()) await walk(key);
        else if (entry.isFile() && key.startsWith(prefix)) {
          const head = await this.head(key);
          if (head !== undefined) heads.push(head);
        }
      }
    };
    await walk(start);
    return heads.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  async delete(key: string, condition?: { readonly ifMatch: BlobVersion }): Promise<boolean> {
    checkKey(key);
    if (condition !== undefined) checkCondition(condition);
    const file = this.fileOf(key);
    const folder = path.dirname(file);
    for (;;) {
      const expected = condition?.ifMatch ?? (await this.head(key))?.version;
      if (expected === undefined) return false;
      const claim = await claimVersion(
        folder,
        path.basename(file),
        expected,
        async () => (await this.versionOrAbsent(file, key)) === expected,
      ).catch((err: unknown) => {
        // No folder: no blob either.
        if (errnoOf(err) === 'ENOENT') return undefined;
        throw this.errorOf(err, key, `deleting blob ${key}`);
      });
      if (claim !== undefined) {
        let settled = false;
        try {
          if ((await this.versionOrAbsent(file, key)) === expected) {
            await fsp.unlink(file);
            settled = true;
            await syncDirectory(folder, `deleting blob ${key}`);
            return true;
          }
          settled = true;
        } catch (err) {
          throw this.errorOf(err, key, `deleting blob ${key}`);
        } finally {
          await (settled ? claim.settled() : claim.abandoned());
        }
      }
      if (condition !== undefined) throw this.refusal(key, condition);
    }
  }

  async close(): Promise<void> {}

  private fileOf(key: string): string {
    return path.join(this.root, ...key.split('/'));
  }

  private async statOf(file: string, key: string): Promise<BigIntStats | undefined> {
    let stat: BigIntStats;
    try {
      stat = await fsp.lstat(file, { bigint: true });
    } catch (err) {
      if (errnoOf(err) === 'ENOENT' || errnoOf(err) === 'ENOTDIR') return undefined;
      throw this.errorOf(err, key, `reading blob ${key}`);
    }
    if (!stat.isFile()) throw new FabricError('INTEGRITY', `blob ${key} is not a regular file: planted`);
    return stat;
  }

  private async versionOrAbsent(file: string, key: string): Promise<string> {
    const stat = await this.statOf(file, key);
    return stat === undefined ? ABSENT : versionOf(stat);
  }

  private refusal(key: string, condition: BlobCondition): PreconditionFailed {
    return new PreconditionFailed(
      key,
      'ifMatch' in condition ? `blob ${key} is no longer at version ${condition.ifMatch}` : `blob ${key} already exists`,
    );
  }

  /** A key that runs through another blob (a/b while a is a blob) is a bad key here, not a broken store. */
  private errorOf(err: unknown, key: string, what: string): FabricError {
    return errnoOf(err) === 'ENOTDIR' || errnoOf(err) === 'EISDIR' ? this.throughBlob(key) : ioError(err, what);
  }

  private throughBlob(key: string): FabricError {
    return new FabricError('INVALID_ARGUMENT', `blob ${key}: a key and a folder of keys share a name`);
  }
}

/** Creates `directory` 0700 when missing; an existing one must be a directory and is otherwise left alone. */
async function openDirectoryAsIs(directory: string): Promise<void> {
  try {
    await fsp.mkdir(directory, { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
    if (!(await fsp.stat(directory)).isDirectory()) throw new Error('not a directory');
  } catch (err) {
    throw new FabricError('UNAVAILABLE', `the blob directory ${directory}: ${(err as Error).message}`);
  }
}
