// Least-recently-used order with O(1) touch, remove and oldest: a Set iterates in insertion order, so
// deleting and re-adding a key moves it to the most recent end, and iteration starts at the least
// recent. This is the eviction order; nothing sorts.
export class LruOrder<K> {
  private readonly order = new Set<K>();

  /** Makes `key` the most recently used (adding it if new). */
  touch(key: K): void {
    this.order.delete(key);
    this.order.add(key);
  }

  remove(key: K): void {
    this.order.delete(key);
  }

  /** The least recently used key, or undefined when empty. */
  oldest(): K | undefined {
    return this.order.values().next().value;
  }

  /**
   * Keys from least to most recently used, each once, read lazily: a key touched or added while the
   * walk runs is not visited again, and a removed one is skipped.
   */
  *fromOldest(): IterableIterator<K> {
    const seen = new Set<K>();
    for (const key of this.order) {
      if (seen.has(key)) continue; // touched during the walk: it moved to the recent end
      seen.add(key);
      yield key;
    }
  }

  get size(): number {
    return this.order.size;
  }
}
