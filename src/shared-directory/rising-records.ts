// A per-context value that only ever rises (a revocation epoch, a holder fence), kept in the store that
// processes on several machines share (a directory, possibly over NFS, or a bucket). Reading the record
// and then writing it back loses updates there: two raisers both read 1, one writes 2000, the other 1000
// after it, and the revocation is gone. So the value is the NAME of a key: `<folder of the context>/
// <value>`, put only if absent (If-None-Match: * on S3, a claim of the absent key on the POSIX store), and
// the record is the greatest key present, read with one listing. Two raises never overwrite each other,
// and a raise to a value already there is the same key (refused: done), so a retry or a lost reply
// changes nothing.
//
// Why one key per value rather than one key replaced with compare-and-swap on its ETag (If-Match): a
// raise then never reads, retries or fails. Under CAS every raiser reads the record, and all but one of
// any that race get 412 and must read and try again (32 raisers: up to 32 rounds, ~500 requests), and a
// raise whose reply was lost cannot tell its own write from another's. Here each raiser makes one put
// whatever the others do, a lost reply is answered by the same key on the retry, and the greatest
// authentic key is the value no matter in which order the puts land. The price is a listing per read,
// kept short by pruning.
//
// Lower entries are pruned after each raise, and the greatest one is never removed: an entry is removed
// only by a raiser that saw a greater one present, so the greatest entry ever created before any moment
// is still there at that moment (whoever removed it would have seen a greater one created earlier). A
// stale listing (an NFS client's cache) only shows entries that did exist: the rule holds. S3's listings
// are strongly consistent (read-after-write), so the same proof holds on a bucket.
//
// A name alone would be trusted from anyone who can write the store, so each entry holds a record sealed
// with the workers' keys (record-seal.ts) for its kind and context that names the entry: the greatest entry
// counts only when it authenticates as that very entry of that context (a planted entry, or one copied
// from another context or value, is INTEGRITY). Reading is one listing and, the first time this process
// sees that entry, one small read, its record: once an entry authenticated, its name (the value) was
// raised by a worker, and a blob put in its place later cannot make that value any less true.
//
// Deletion is what a seal cannot catch: whoever can delete the greatest entry lowers the value, and a
// lowered revocation epoch would let revoked tokens in again. Values never fall, so a process that saw a
// value authenticated and then lists a lower one knows an entry was deleted: INTEGRITY, audited, never
// the lower value. That covers every worker that read the context since it started. A worker that never
// saw the higher value cannot tell a deletion from no raise on its own, so a reader may name a value it
// knows was raised (`atLeast`: the agent's workflow records the epoch it last raised), which then counts
// as seen for that read.
import { createHash } from 'node:crypto';

import { isPreconditionFailed } from '../blob-store/blob-errors';
import type { BlobHead, BlobStore } from '../blob-store/blob-store';
import { FabricError } from '../fabric/errors';
import { openRecordPrefix, plantedNonFiles } from './record-prefix';
import type { RecordSeal } from './record-seal';

/** Listings tried when the greatest entry listed is gone before it is read (a greater one was raised meanwhile). */
const MAX_LISTINGS = 8;
/** Entries remembered as authentic, and contexts' highest values seen, per process: a few per context in use. */
const MAX_KNOWN_ENTRIES = 16_384;

/** How values are written as entry names, and ordered. */
export interface RisingValue<V> {
  /** A key segment of [0-9a-z.] characters only, not starting with '.'. */
  nameOf(value: V): string;
  /** The value a name holds; undefined for a name no raise could have made. */
  valueOf(name: string): V | undefined;
  /** Negative, zero or positive, as `a` is below, equal to or above `b`. */
  compare(a: V, b: V): number;
}

/** A context's entries as listed: the greatest, and the keys of those below it. */
interface Listing<V> {
  highest: V;
  top: BlobHead;
  below: string[];
}

export class RisingRecords<V> {
  /** Keys of entries that authenticated, oldest first. */
  private readonly known = new Map<string, true>();
  /** Each context's highest value this process saw authenticated: values never fall, so a lower one is a deletion. */
  private readonly seen = new Map<string, V>();

  private constructor(
    private readonly store: BlobStore,
    /** Where this kind's records are in the store ("epochs/"). */
    private readonly prefix: string,
    /** Names the record kind in seals and errors ("epoch", "fence"). */
    private readonly kind: string,
    private readonly values: RisingValue<V>,
    private readonly seal: RecordSeal,
  ) {}

  static async open<V>(
    store: BlobStore,
    prefix: string,
    kind: string,
    values: RisingValue<V>,
    seal: RecordSeal,
  ): Promise<RisingRecords<V>> {
    await openRecordPrefix(store, prefix, `the ${kind} directory`);
    return new RisingRecords(store, prefix, kind, values, seal);
  }

  /**
   * The context's greatest value; undefined if none was ever raised. INTEGRITY (audited) for a foreign,
   * forged or deleted entry. `atLeast`: a value the caller knows was raised; a lower listing is then a
   * deletion here too, whether or not this process read that value. Not remembered: it holds for this read.
   */
  async highest(contextId: string, atLeast?: V): Promise<V | undefined> {
    return (await this.entries(contextId, atLeast))?.highest;
  }

  /**
   * Records `value` unless a value at least as high is there; durable before it returns. Returns the
   * greatest value afterwards: `value` itself, or one another raiser recorded first or meanwhile.
   * `content` goes into the entry for people reading the store; nothing here reads it back but
   * `contentOf`.
   */
  async raise(contextId: string, value: V, content: string): Promise<V> {
    const before = await this.entries(contextId);
    if (before && this.values.compare(before.highest, value) >= 0) return before.highest;
    const name = this.values.nameOf(value);
    const bytes = this.seal.seal(this.kind, contextId, JSON.stringify({ entry: name, note: content }));
    // Refused: this very value is there already (checked when read).
    await this.store.put(this.folderOf(contextId) + name, bytes, { ifNoneMatch: '*' }).catch((err: unknown) => {
      if (!isPreconditionFailed(err)) throw err;
    });
    const after = await this.entries(contextId);
    if (!after) throw new FabricError('UNAVAILABLE', `the ${this.kind} of context ${contextId} vanished while it was raised`);
    await this.prune(after.below);
    return after.highest;
  }

  /** What the entry of `value` holds ('' if it is gone or does not authenticate: it only ever feeds messages). */
  async contentOf(contextId: string, value: V): Promise<string> {
    const name = this.values.nameOf(value);
    const body = await this.seal.read(this.store, this.folderOf(contextId) + name, this.kind, contextId).catch(() => undefined);
    const entry = body === undefined ? undefined : entryOf(body);
    return entry?.entry === name ? entry.note : '';
  }

  /** The greatest entry, authenticated, and the keys of those below it; undefined for a context with none. */
  private async entries(contextId: string, atLeast?: V): Promise<Listing<V> | undefined> {
    let fell: { value: V; by: string } | undefined;
    for (let listing = 0; listing < MAX_LISTINGS; listing++) {
      const listed = await this.listing(contextId);
      const floor = this.floorOf(contextId, atLeast);
      // Below a value known raised: deleted, or a stale listing (listed again, a stale cache catches up).
      if (floor !== undefined && (listed === undefined || this.values.compare(listed.highest, floor.value) < 0)) {
        fell = floor;
        continue;
      }
      if (listed === undefined) return undefined;
      if (await this.authentic(contextId, listed.top)) {
        remember(this.seen, contextId, listed.highest);
        return listed;
      }
    }
    if (fell) {
      const entry = this.values.nameOf(fell.value);
      throw await this.seal.forged(this.kind, contextId, `lost its entry ${entry}, which ${fell.by}: deleted`);
    }
    throw new FabricError('UNAVAILABLE', `the ${this.kind} of context ${contextId} kept changing while it was read`);
  }

  /** The value a listing may not fall below: the highest this process saw, or the caller's `atLeast` if higher. */
  private floorOf(contextId: string, atLeast: V | undefined): { value: V; by: string } | undefined {
    const seen = this.seen.get(contextId);
    if (atLeast !== undefined && (seen === undefined || this.values.compare(atLeast, seen) > 0))
      return { value: atLeast, by: 'the caller knows was raised' };
    return seen === undefined ? undefined : { value: seen, by: 'this worker read before' };
  }

  /** The greatest entry by name and the keys of those below it, as listed; undefined for a context with none. */
  private async listing(contextId: string): Promise<Listing<V> | undefined> {
    const folder = this.folderOf(contextId);
    const [planted] = await plantedNonFiles(this.store, folder);
    if (planted !== undefined)
      throw await this.seal.forged(
        this.kind,
        contextId,
        `holds ${JSON.stringify(planted.slice(0, 64))}, which is no regular file: planted`,
      );
    const entries: { head: BlobHead; value: V }[] = [];
    for (const head of await this.store.list(folder)) {
      const name = head.key.slice(folder.length);
      const value = this.values.valueOf(name);
      // Fail closed: an entry nobody here made means someone else writes in this store.
      if (value === undefined)
        throw await this.seal.forged(this.kind, contextId, `holds a foreign entry ${JSON.stringify(name.slice(0, 64))}`);
      entries.push({ head, value });
    }
    if (entries.length === 0) return undefined;
    const top = entries.reduce((a, b) => (this.values.compare(b.value, a.value) > 0 ? b : a));
    return {
      highest: top.value,
      top: top.head,
      below: entries.filter((entry) => this.values.compare(entry.value, top.value) < 0).map((entry) => entry.head.key),
    };
  }

  /** True when entry `top` holds its own sealed record (or did once); false when it is gone; INTEGRITY (audited) otherwise. */
  private async authentic(contextId: string, top: BlobHead): Promise<boolean> {
    if (this.known.has(top.key)) return true;
    const body = await this.seal.read(this.store, top.key, this.kind, contextId, top.size);
    if (body === undefined) return false;
    const name = top.key.slice(this.folderOf(contextId).length);
    if (entryOf(body)?.entry !== name)
      throw await this.seal.forged(this.kind, contextId, `entry ${name} holds the record of another entry`);
    remember(this.known, top.key, true);
    return true;
  }

  /**
   * Removes entries seen below a greater one (see the file's head for why that is safe). Housekeeping:
   * the raise is durable already, and a failure here leaves entries that only cost a key each until
   * the next raise prunes them.
   */
  private async prune(keys: string[]): Promise<void> {
    for (const key of keys) await this.store.delete(key).catch(() => undefined);
  }

  private folderOf(contextId: string): string {
    // Hashed names: context ids are arbitrary strings, keys are not.
    return `${this.prefix}${createHash('sha256').update(contextId).digest('hex').slice(0, 40)}/`;
  }
}

/** Adds to a per-process memory, forgetting its oldest entry when it is full. */
function remember<T>(memory: Map<string, T>, key: string, value: T): void {
  memory.delete(key);
  if (memory.size >= MAX_KNOWN_ENTRIES) memory.delete(memory.keys().next().value!);
  memory.set(key, value);
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
