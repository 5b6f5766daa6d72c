// A per-context value that only ever rises (a revocation epoch, a holder fence), kept in a directory that
// processes on several machines share, possibly over NFS. Reading the record and then writing it back
// loses updates there: two raisers both read 1, one writes 2000, the other 1000 after it, and the
// revocation is gone. flock is not reliable on NFS and a lock file needs a stale-lock rule that hands the
// lock to a waiter while a frozen holder may still write. So the value is the NAME of an entry:
// `<folder of the context>/<value>`, created with O_EXCL, which the file server does atomically, and the
// record is the greatest name present. Two raises never overwrite each other, and a raise to a value
// already there is the same entry (EEXIST: done), so a retry or a lost NFS reply changes nothing.
//
// Lower entries are pruned after each raise, and the greatest one is never removed: an entry is removed
// only by a raiser that saw a greater one present, so the greatest entry ever created before any moment
// is still there at that moment (whoever removed it would have seen a greater one created earlier).
// A stale directory listing (an NFS client's cache) only shows entries that did exist: the rule holds.
// Reading is one directory listing, no file opened.
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { join } from 'node:path';

import { FabricError } from '../fabric/errors';
import { syncDirectory } from '../tiers/cold/durable-file';
import { openPrivateDirectory, PRIVATE_DIRECTORY_MODE, PRIVATE_FILE_MODE } from '../tiers/cold/private-directory';

/** How values are written as entry names, and ordered. */
export interface RisingValue<V> {
  /** A file name of [0-9a-z.] characters only: it must not start with '.', which marks foreign files. */
  nameOf(value: V): string;
  /** The value a name holds; undefined for a name no raise could have made. */
  valueOf(name: string): V | undefined;
  /** Negative, zero or positive, as `a` is below, equal to or above `b`. */
  compare(a: V, b: V): number;
}

export class RisingRecords<V> {
  private constructor(
    private readonly directory: string,
    /** Names the record kind in errors ("epoch", "fence"). */
    private readonly kind: string,
    private readonly values: RisingValue<V>,
  ) {}

  static async open<V>(directory: string, kind: string, values: RisingValue<V>): Promise<RisingRecords<V>> {
    await openPrivateDirectory(directory, `the ${kind} directory`);
    return new RisingRecords(directory, kind, values);
  }

  /** The context's greatest value; undefined if none was ever raised. INTEGRITY for a foreign entry. */
  async highest(contextId: string): Promise<V | undefined> {
    return (await this.entries(contextId))?.highest;
  }

  /**
   * Records `value` unless a value at least as high is there; durable before it returns. Returns the
   * greatest value afterwards: `value` itself, or one another raiser recorded first or meanwhile.
   * `content` goes into the entry for people reading the directory; nothing here reads it back but
   * `contentOf`.
   */
  async raise(contextId: string, value: V, content: string): Promise<V> {
    const before = await this.entries(contextId);
    if (before && this.values.compare(before.highest, value) >= 0) return before.highest;
    const folder = this.folderOf(contextId);
    await fsp.mkdir(folder, { mode: PRIVATE_DIRECTORY_MODE }).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw this.unavailable(contextId, err);
    });
    await this.create(contextId, join(folder, this.values.nameOf(value)), content);
    await syncDirectory(folder, `the ${this.kind} of context ${contextId}`);
    const after = await this.entries(contextId);
    if (!after) throw new FabricError('UNAVAILABLE', `the ${this.kind} of context ${contextId} vanished while it was raised`);
    await this.prune(contextId, after.below);
    return after.highest;
  }

  /** What the entry of `value` holds ('' if it is gone or unreadable: it only ever feeds messages). */
  async contentOf(contextId: string, value: V): Promise<string> {
    return fsp.readFile(join(this.folderOf(contextId), this.values.nameOf(value)), 'utf8').catch(() => '');
  }

  /** The greatest entry and the names of those below it; undefined for a context with none. */
  private async entries(contextId: string): Promise<{ highest: V; below: string[] } | undefined> {
    let names: string[];
    try {
      names = await fsp.readdir(this.folderOf(contextId));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw this.unavailable(contextId, err);
    }
    let highest: { name: string; value: V } | undefined;
    for (const name of names) {
      // Dot names are no entries: NFS's .nfsXXXX files of removed entries still open somewhere.
      if (name.startsWith('.')) continue;
      const value = this.values.valueOf(name);
      // Fail closed: an entry nobody here made means someone else writes in this directory.
      if (value === undefined)
        throw new FabricError(
          'INTEGRITY',
          `the ${this.kind} records of context ${contextId} hold a foreign entry ${JSON.stringify(name.slice(0, 64))}`,
        );
      if (!highest || this.values.compare(value, highest.value) > 0) highest = { name, value };
    }
    if (!highest) return undefined;
    const top = highest;
    return {
      highest: top.value,
      below: names.filter(
        (name) => !name.startsWith('.') && name !== top.name && this.values.compare(this.values.valueOf(name)!, top.value) < 0,
      ),
    };
  }

  /** O_EXCL: the name is the record, so an existing entry is this very value, already recorded. */
  private async create(contextId: string, path: string, content: string): Promise<void> {
    let file: FileHandle;
    try {
      file = await fsp.open(path, 'wx', PRIVATE_FILE_MODE);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return;
      throw this.unavailable(contextId, err);
    }
    try {
      await file.writeFile(content);
      await file.sync();
    } catch (err) {
      // The entry stands (its name is the value); only its note for people may be short.
      throw this.unavailable(contextId, err);
    } finally {
      await file.close().catch(() => undefined);
    }
  }

  /**
   * Removes entries seen below a greater one (see the file's head for why that is safe). Housekeeping:
   * the raise is durable already, and a failure here leaves entries that only cost a name each until
   * the next raise prunes them.
   */
  private async prune(contextId: string, names: string[]): Promise<void> {
    const folder = this.folderOf(contextId);
    for (const name of names) await fsp.rm(join(folder, name), { force: true }).catch(() => undefined);
  }

  private folderOf(contextId: string): string {
    // Hashed names: context ids are arbitrary strings, file names are not.
    return join(this.directory, createHash('sha256').update(contextId).digest('hex').slice(0, 40));
  }

  private unavailable(contextId: string, err: unknown): FabricError {
    return new FabricError('UNAVAILABLE', `the ${this.kind} of context ${contextId}: ${(err as Error).message}`);
  }
}
