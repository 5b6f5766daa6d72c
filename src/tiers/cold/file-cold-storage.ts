// The cold tier in a directory, possibly a mount shared by several machines: `segments/<id>.seg` and
// `manifests/<context>.manifest` (cold-directory.ts). A segment is written to a temp file at its blocks'
// final offsets, with O_DIRECT where the file system takes it, made durable and renamed into place; a
// manifest is replaced the same way. Reads never trust a path: a link, a FIFO or a device where a file
// belongs is INTEGRITY (regular-file.ts), and the O_DIRECT handle must be the very file first checked.
import { constants as fsConstants, promises as fsp } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';

import { PreconditionFailed } from '../../blob-store/blob-errors';
import type { BlobVersion } from '../../blob-store/blob-store';
import { readFully, syncDirectory, writeAtomically, writeFully } from '../../blob-store/posix/durable-file';
import { versionOf } from '../../blob-store/posix/file-version';
import { PosixBlobStore } from '../../blob-store/posix/posix-blob-store';
import { errnoOf, ioError } from '../../blob-store/posix/io-errors';
import { openRegularFile, readRegularFile } from '../../blob-store/posix/regular-file';
import { isTempFile } from '../../blob-store/posix/temp-files';
import { prepareDirectory, removeStaleTempFiles, segmentFileName, segmentIdOfFile, type ColdDirectory } from './cold-directory';
import type { ColdStorage, SegmentSink, SegmentSource, StoredManifest } from './cold-storage';
import { contextIdOfManifestFile, manifestFileName } from './context-names';
import { directIoFits, directIoWorks } from './direct-io';
import { MAX_MANIFEST_FILE_BYTES } from './manifest-file';
import { ManifestLogStore } from './manifest-log-store';

/** The second handle a direct read uses: like openRegularFile's, never through a link nor blocking on a FIFO. */
const DIRECT_READ_FLAGS = fsConstants.O_RDONLY | fsConstants.O_DIRECT | (fsConstants.O_NOFOLLOW ?? 0) | (fsConstants.O_NONBLOCK ?? 0);

export class FileColdStorage implements ColdStorage {
  readonly versioned = false;

  private constructor(
    private readonly directory: ColdDirectory,
    /** The directory's file system takes O_DIRECT I/O (and the store was asked to use it). */
    private readonly directIo: boolean,
    /** Manifest-log records in `manifest-log/`, through the POSIX blob store (create-only puts by link(2)). */
    readonly log: ManifestLogStore,
  ) {}

  /** Creates the folders if needed, removes stale temp files of crashed writers, probes O_DIRECT. */
  static async open(root: string, staleTempAgeMs: number, directIo: boolean): Promise<FileColdStorage> {
    const directory = await prepareDirectory(root);
    await removeStaleTempFiles(directory, staleTempAgeMs);
    return new FileColdStorage(directory, directIo && (await directIoWorks(directory.segments)), logIn(directory.root));
  }

  async writeSegment(
    segmentId: string,
    _size: number,
    what: string,
    wantDirect: boolean,
    fill: (sink: SegmentSink) => Promise<void>,
  ): Promise<void> {
    const direct = this.directIo && wantDirect;
    await writeAtomically(
      this.directory.segments,
      segmentFileName(segmentId),
      what,
      (file) => fill({ direct, write: (bytes, offset) => writeFully(file, bytes, offset) }),
      { direct },
    );
  }

  async openSegment(segmentId: string, where: string): Promise<SegmentSource | undefined> {
    // No cap here: the header states the file's exact size, checked before any block is read.
    const opened = await openRegularFile(this.segmentPath(segmentId), `${where}: segment file`, Number.MAX_SAFE_INTEGER);
    if (opened === undefined) return undefined;
    const { handle, size } = opened;
    let direct: FileHandle | undefined;
    return {
      size,
      read: (into, offset) => readFully(handle, into, offset),
      blockReader: async (blockBytes) => {
        if (this.directIo && directIoFits(blockBytes)) direct ??= await this.reopenDirect(segmentId, handle);
        const file = direct ?? handle;
        return { staged: file === direct, read: (into, offset) => readFully(file, into, offset) };
      },
      close: async () => {
        await direct?.close().catch(() => undefined);
        await handle.close().catch(() => undefined);
      },
    };
  }

  async deleteSegment(segmentId: string): Promise<void> {
    await fsp.rm(this.segmentPath(segmentId), { force: true }).catch((err: unknown) => {
      throw ioError(err, `deleting segment ${segmentId}`);
    });
  }

  async listSegments(): Promise<string[]> {
    return (await this.listFolder(this.directory.segments)).map(segmentIdOfFile).filter((id): id is string => id !== undefined);
  }

  async olderThan(segmentIds: string[], minAgeMs: number): Promise<string[]> {
    const now = Date.now();
    const old: string[] = [];
    for (const id of segmentIds) {
      const stat = await fsp.stat(this.segmentPath(id)).catch(() => undefined);
      if (stat !== undefined && now - stat.mtimeMs >= minAgeMs) old.push(id);
    }
    return old;
  }

  async writeManifest(contextId: string, bytes: Buffer, what: string): Promise<undefined> {
    await writeAtomically(this.directory.manifests, manifestFileName(contextId), what, async (file) => {
      await file.writeFile(bytes);
    });
    return undefined;
  }

  async readManifest(contextId: string, where: string): Promise<StoredManifest | undefined> {
    const file = path.join(this.directory.manifests, manifestFileName(contextId));
    const read = await readRegularFile(file, `${where}: manifest file`, MAX_MANIFEST_FILE_BYTES);
    // The identity of the file read: a stat of the path before the read would pair a base replaced in
    // between (a compaction) with the identity of the one it replaced.
    return read === undefined ? undefined : { bytes: read.bytes, version: versionOf(read.stat) };
  }

  async hasManifest(contextId: string): Promise<boolean> {
    try {
      await fsp.stat(path.join(this.directory.manifests, manifestFileName(contextId)));
      return true;
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return false;
      throw ioError(err, `looking for the manifest of context '${contextId}'`);
    }
  }

  async manifestVersion(contextId: string): Promise<BlobVersion | undefined> {
    const file = path.join(this.directory.manifests, manifestFileName(contextId));
    const stat = await fsp.lstat(file, { bigint: true }).catch((err: unknown) => {
      if (errnoOf(err) === 'ENOENT') return undefined;
      throw ioError(err, `looking for the manifest of context '${contextId}'`);
    });
    return stat && versionOf(stat);
  }

  async deleteManifest(contextId: string, what: string, condition?: { readonly ifMatch: BlobVersion }): Promise<void> {
    // No atomic compare-and-unlink in POSIX: the claimed log record (cold-store) is the fence here, this
    // comparison catches a base replaced whole.
    if (condition !== undefined && (await this.manifestVersion(contextId)) !== condition.ifMatch) {
      throw new PreconditionFailed(contextId, `${what}: the manifest's base is no longer the version read`);
    }
    await fsp.rm(path.join(this.directory.manifests, manifestFileName(contextId)), { force: true }).catch((err: unknown) => {
      throw ioError(err, what);
    });
    await syncDirectory(this.directory.manifests, what);
  }

  async listManifests(): Promise<string[]> {
    return (await this.listFolder(this.directory.manifests)).map(contextIdOfManifestFile).filter((id): id is string => id !== undefined);
  }

  /** An O_DIRECT handle on the same file as `checked`; undefined when the file system will not (the plain one reads the same bytes). */
  private async reopenDirect(segmentId: string, checked: FileHandle): Promise<FileHandle | undefined> {
    let direct: FileHandle | undefined;
    try {
      direct = await fsp.open(this.segmentPath(segmentId), DIRECT_READ_FLAGS);
      // The path opened again: it must still be the very file checked and read so far, not one put there since.
      const [first, reopened] = await Promise.all([checked.stat(), direct.stat()]);
      if (reopened.isFile() && reopened.dev === first.dev && reopened.ino === first.ino) return direct;
    } catch {
      // No O_DIRECT here after all.
    }
    await direct?.close().catch(() => undefined);
    return undefined;
  }

  private segmentPath(segmentId: string): string {
    return path.join(this.directory.segments, segmentFileName(segmentId));
  }

  private async listFolder(folder: string): Promise<string[]> {
    try {
      return (await fsp.readdir(folder)).filter((name) => !isTempFile(name));
    } catch (err) {
      throw ioError(err, `listing ${folder}`);
    }
  }
}

/** The manifest log in `<root>/manifest-log/`, a POSIX blob store opened (created 0700) by the first record written. */
function logIn(root: string): ManifestLogStore {
  const folder = path.join(root, 'manifest-log');
  let opened: Promise<PosixBlobStore> | undefined;
  return new ManifestLogStore(async (create) => {
    if (opened === undefined) {
      const exists = await fsp.lstat(folder).then(
        () => true,
        (err: unknown) => {
          if (errnoOf(err) === 'ENOENT') return false;
          throw ioError(err, `looking for ${folder}`);
        },
      );
      if (!exists && !create) return undefined;
      opened = PosixBlobStore.open(folder);
      opened.catch(() => (opened = undefined));
    }
    return opened;
  }, '');
}
