// A per-context value that only ever rises (a revocation epoch, a holder fence), kept in a directory that
// processes on several machines share, possibly over NFS. Reading the record and then writing it back
// loses updates there: two raisers both read 1, one writes 2000, the other 1000 after it, and the
// revocation is gone. flock is not reliable on NFS and a lock file needs a stale-lock rule that hands the
// lock to a waiter while a frozen holder may still write. So the value is the NAME of an entry:
// `<folder of the context>/<value>`, created with link(2), which fails on an existing name, atomically on
// the file server, and the record is the greatest name present. Two raises never overwrite each other,
// and a raise to a value already there is the same entry (EEXIST: done), so a retry or a lost NFS reply
// changes nothing.
//
// Lower entries are pruned after each raise, and the greatest one is never removed: an entry is removed
// only by a raiser that saw a greater one present, so the greatest entry ever created before any moment
// is still there at that moment (whoever removed it would have seen a greater one created earlier).
// A stale directory listing (an NFS client's cache) only shows entries that did exist: the rule holds.
//
// A name alone would be trusted from anyone who can write the directory, so each entry holds a record
// sealed with the workers' keys (record-seal.ts) that names the entry: the greatest entry counts only when
// it authenticates as that very entry of that context (a planted or copied one is INTEGRITY). Entries are
// written complete to a temp file before they are linked to their name, so no reader ever sees an entry
// before its record. Reading is one directory listing and, the first time this process sees that entry,
// one small file, its record: once an entry authenticated, its name (the value) was raised by a worker,
// and a file put in its place later cannot make that value any less true.
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';

import { FabricError } from '../fabric/errors';
import { removeStaleTempFilesIn, STALE_TEMP_AGE_MS } from '../blob-store/posix/temp-files';
import { createOnce, syncDirectory } from '../blob-store/posix/durable-file';
import { openPrivateDirectory, PRIVATE_DIRECTORY_MODE } from '../blob-store/posix/private-directory';
import type { RecordSeal } from './record-seal';

/** Listings tried when the greatest entry listed is gone before it is read (a greater one was raised meanwhile). */
const MAX_LISTINGS = 8;
/** Entries remembered as authentic, per process: a few per context in use. */
const MAX_KNOWN_ENTRIES = 16_384;

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
  /** `<context folder>/<entry>` of entries that authenticated, oldest first. */
  private readonly known = new Set<string>();

  private constructor(
    private readonly directory: string,
    /** Names the record kind in seals and errors ("epoch", "fence"). */
    private readonly kind: string,
    private readonly values: RisingValue<V>,
    private readonly seal: RecordSeal,
  ) {}

  static async open<V>(directory: string, kind: string, values: RisingValue<V>, seal: RecordSeal): Promise<RisingRecords<V>> {
    await openPrivateDirectory(directory, `the ${kind} directory`);
    await removeStaleTempFilesIn(directory, STALE_TEMP_AGE_MS);
    return new RisingRecords(directory, kind, values, seal);
  }

  /** The context's greatest value; undefined if none was ever raised. INTEGRITY (audited) for a foreign or forged entry. */
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
    await this.create(contextId, folder, this.values.nameOf(value), content);
    await syncDirectory(folder, `the ${this.kind} of context ${contextId}`);
    const after = await this.entries(contextId);
    if (!after) throw new FabricError('UNAVAILABLE', `the ${this.kind} of context ${contextId} vanished while it was raised`);
    await this.prune(contextId, after.below);
    return after.highest;
  }

  /** What the entry of `value` holds ('' if it is gone or does not authenticate: it only ever feeds messages). */
  async contentOf(contextId: string, value: V): Promise<string> {
    const name = this.values.nameOf(value);
    const body = await this.seal.read(join(this.folderOf(contextId), name), this.kind, contextId).catch(() => undefined);
    const entry = body === undefined ? undefined : entryOf(body);
    return entry?.entry === name ? entry.note : '';
  }

  /** The greatest entry, authenticated, and the names of those below it; undefined for a context with none. */
  private async entries(contextId: string): Promise<{ highest: V; below: string[] } | undefined> {
    for (let listing = 0; listing < MAX_LISTINGS; listing++) {
      const listed = await this.listing(contextId);
      if (listed === undefined || (await this.authentic(contextId, listed.top))) return listed;
    }
    throw new FabricError('UNAVAILABLE', `the ${this.kind} of context ${contextId} kept changing while it was read`);
  }

  /** The greatest entry by name and the names of those below it, as listed; undefined for a context with none. */
  private async listing(contextId: string): Promise<{ highest: V; top: string; below: string[] } | undefined> {
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
        throw await this.seal.forged(this.kind, contextId, `holds a foreign entry ${JSON.stringify(name.slice(0, 64))}`);
      if (!highest || this.values.compare(value, highest.value) > 0) highest = { name, value };
    }
    if (!highest) return undefined;
    const top = highest;
    return {
      highest: top.value,
      top: top.name,
      below: names.filter(
        (name) => !name.startsWith('.') && name !== top.name && this.values.compare(this.values.valueOf(name)!, top.value) < 0,
      ),
    };
  }

  /** True when entry `name` holds its own sealed record (or did once); false when it is gone; INTEGRITY (audited) otherwise. */
  private async authentic(contextId: string, name: string): Promise<boolean> {
    const path = join(this.folderOf(contextId), name);
    if (this.known.has(path)) return true;
    const body = await this.seal.read(path, this.kind, contextId);
    if (body === undefined) return false;
    if (entryOf(body)?.entry !== name)
      throw await this.seal.forged(this.kind, contextId, `entry ${name} holds the record of another entry`);
    if (this.known.size >= MAX_KNOWN_ENTRIES) this.known.delete(this.known.values().next().value!);
    this.known.add(path);
    return true;
  }

  /** Created once: an existing name is this very value, already recorded (checked when read). */
  private async create(contextId: string, folder: string, name: string, content: string): Promise<void> {
    const bytes = this.seal.seal(this.kind, contextId, JSON.stringify({ entry: name, note: content }));
    await createOnce(this.directory, join(folder, name), bytes).catch((err: unknown) => {
      throw this.unavailable(contextId, err);
    });
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
    if (err instanceof FabricError) return err;
    return new FabricError('UNAVAILABLE', `the ${this.kind} of context ${contextId}: ${(err as Error).message}`);
  }
}

/** An entry's sealed body: its own name, and a note for people. */
function entryOf(body: string): { entry: string; note: string } | undefined {
  try {
    const { entry, note } = JSON.parse(body) as Record<string, unknown>;
    return typeof entry === 'string' && typeof note === 'string' ? { entry, note } : undefined;
  } catch {
    return undefined;
  }
}
