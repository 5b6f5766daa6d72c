// The disk tier's bookkeeping in one process: the numeric disk keys the native allocator stores per
// block, the cold-store references they stand for, and how many users (blocks with a disk copy, pages
// of written manifests) each segment file has, so a segment is deleted exactly when its last user goes.
import type { ColdBlockRef } from './cold';

export class DiskLedger {
  private nextKey = 1;
  private readonly refs = new Map<number, ColdBlockRef>();
  private readonly segmentUsers = new Map<string, number>();

  /** A new disk key for ref; the ref's segment gains a user. */
  register(ref: ColdBlockRef): number {
    const key = this.nextKey++;
    this.refs.set(key, ref);
    this.use(ref.segmentId, 1);
    return key;
  }

  ref(key: number): ColdBlockRef {
    const ref = this.refs.get(key);
    if (!ref) throw new Error(`disk key ${key} is not registered`);
    return ref;
  }

  /** Forgets keys of freed blocks; returns the segments that no longer have users. */
  forget(keys: Iterable<number>): string[] {
    const unused: string[] = [];
    for (const key of keys) {
      const ref = this.refs.get(key);
      if (!ref) continue;
      this.refs.delete(key);
      if (this.use(ref.segmentId, -1) === 0) unused.push(ref.segmentId);
    }
    return unused;
  }

  retainManifest(pages: readonly ColdBlockRef[]): void {
    for (const page of pages) this.use(page.segmentId, 1);
  }

  /** Drops a manifest's hold on its segments; returns those left without users. */
  releaseManifest(pages: readonly ColdBlockRef[]): string[] {
    const unused: string[] = [];
    for (const page of pages) if (this.use(page.segmentId, -1) === 0) unused.push(page.segmentId);
    return unused;
  }

  /** Whether a block copy or manifest in this process still uses the segment. */
  uses(segmentId: string): boolean {
    return this.segmentUsers.has(segmentId);
  }

  get liveKeys(): number {
    return this.refs.size;
  }

  get liveSegments(): number {
    return this.segmentUsers.size;
  }

  private use(segmentId: string, delta: number): number {
    const users = (this.segmentUsers.get(segmentId) ?? 0) + delta;
    if (users <= 0) this.segmentUsers.delete(segmentId);
    else this.segmentUsers.set(segmentId, users);
    return Math.max(users, 0);
  }
}
