// The contexts one TieredMemory holds, by id: each one's allocator handle, tenant and durable copy, one
// lock per context (operations on a context run one at a time; the allocator would answer BUSY), and
// the order of last use that eviction walks.
import { FabricError } from '../fabric/errors';
import type { ContextHandle, TenantId } from '../fabric/types';
import type { ColdBlockRef, ContextAttachment } from './cold';
import { KeyedMutex } from './keyed-mutex';
import { LruOrder } from './lru-order';

export interface ContextEntry {
  readonly id: string;
  readonly handle: ContextHandle;
  readonly tenant: TenantId;
  /** Version of the newest manifest; segments written for it carry the same version. */
  version: number;
  /** The pages the newest manifest names; undefined before the first durable copy. */
  manifest?: readonly ColdBlockRef[];
  /** The owner's note kept with the KV (cold/types.ts): replaced whole, never changed in place. */
  attachment?: ContextAttachment;
}

export class ContextRegistry {
  readonly locks = new KeyedMutex();
  private readonly entries = new Map<string, ContextEntry>();
  private readonly recency = new LruOrder<ContextEntry>();

  add(entry: ContextEntry): void {
    this.requireNew(entry.id);
    this.entries.set(entry.id, entry);
    this.recency.touch(entry);
  }

  remove(entry: ContextEntry): void {
    if (this.entries.get(entry.id) === entry) this.entries.delete(entry.id);
    this.recency.remove(entry);
  }

  /** STALE_HANDLE for an id this registry does not hold. */
  get(contextId: string): ContextEntry {
    const entry = this.entries.get(contextId);
    if (!entry) throw new FabricError('STALE_HANDLE', `no context ${contextId}`);
    return entry;
  }

  /** get(), and the context becomes the most recently used. */
  touch(contextId: string): ContextEntry {
    const entry = this.get(contextId);
    this.recency.touch(entry);
    return entry;
  }

  has(contextId: string): boolean {
    return this.entries.has(contextId);
  }

  /** Whether `entry` is still the registered context of its id (not released or replaced meanwhile). */
  holds(entry: ContextEntry): boolean {
    return this.entries.get(entry.id) === entry;
  }

  ids(): string[] {
    return [...this.entries.keys()];
  }

  /** Contexts from least to most recently used: the eviction order. */
  leastRecentlyUsed(): IterableIterator<ContextEntry> {
    return this.recency.fromOldest();
  }

  /** INVALID_ARGUMENT for an empty id or one already held. */
  requireNew(contextId: string): void {
    if (typeof contextId !== 'string' || contextId.length === 0) {
      throw new FabricError('INVALID_ARGUMENT', 'context id must be a non-empty string');
    }
    if (this.entries.has(contextId)) throw new FabricError('INVALID_ARGUMENT', `context ${contextId} already exists`);
  }
}
