// Fencing of slow holders. A worker that stops answering (frozen, partitioned, swapping) is taken for
// dead: its agents' workflows fail over and another worker adopts their contexts from the cold tier.
// If the old holder wakes up mid-operation it must not write a manifest over the new holder's newer one.
// Each adoption claims the context with the failover's epoch (the workflow's failover count) and the
// activity attempt in a fence record in the shared store (a later claim wins: a timed-out attempt of
// the adoption that a frozen worker runs late must not take the context back from the attempt that
// succeeded); a holder checks that no other holder claimed the context after it
// before every manifest write, and drops a context it has lost. Contexts never adopted have no fence.
// Fences stay after release (like revocation epochs): a holder waking after the release stays fenced.
// The fence is a rising record (rising-records.ts): a late claim that read an older fence cannot write
// over a later one, across processes and machines. Check-then-write of a manifest on a shared file
// system still leaves a window of one manifest write; the fence is not a lock.
import { createHash } from 'node:crypto';

import type { BlobStore } from '../blob-store/blob-store';
import { FabricError } from '../fabric/errors';
import type { RecordSeal } from './record-seal';
import { RisingRecords, type RisingValue } from './rising-records';

interface Fence {
  /** The failover that made the holder the holder (1 for the first)... */
  epoch: number;
  /** ...and the attempt of its adoption activity that did. */
  attempt: number;
  /** The holder's task queue, hashed: entry keys hold no arbitrary strings. It breaks ties only. */
  holderTag: string;
}

const FENCE_NAME = /^([1-9][0-9]{0,15})\.([1-9][0-9]{0,15})\.([0-9a-f]{16})$/;

const FENCES: RisingValue<Fence> = {
  nameOf: ({ epoch, attempt, holderTag }) => `${epoch}.${attempt}.${holderTag}`,
  valueOf(name) {
    const match = FENCE_NAME.exec(name);
    if (!match) return undefined;
    const [epoch, attempt] = [Number(match[1]), Number(match[2])];
    return Number.isSafeInteger(epoch) && Number.isSafeInteger(attempt) ? { epoch, attempt, holderTag: match[3]! } : undefined;
  },
  compare: (a, b) => a.epoch - b.epoch || a.attempt - b.attempt || (a.holderTag < b.holderTag ? -1 : a.holderTag > b.holderTag ? 1 : 0),
};

function tagOf(holder: string): string {
  return createHash('sha256').update(holder).digest('hex').slice(0, 16);
}

export class HolderFences {
  private readonly holderTag: string;

  private constructor(
    private readonly records: RisingRecords<Fence>,
    /** This worker's own task queue: its identity as a holder. */
    private readonly holder: string,
  ) {
    this.holderTag = tagOf(holder);
  }

  /** The fences under `prefix` ("fences/") of `store`, for the holder `holder`. */
  static async open(store: BlobStore, prefix: string, holder: string, seal: RecordSeal): Promise<HolderFences> {
    return new HolderFences(await RisingRecords.open(store, prefix, 'fence', FENCES, seal), holder);
  }

  /**
   * Claims the context for this worker at (epoch, attempt), before adopting it. STALE_HANDLE when a
   * later failover, or a later attempt of this one, claimed it before or while this claim was made.
   * INVALID_ARGUMENT for counts that are not positive integers.
   */
  async claim(contextId: string, epoch: number, attempt: number): Promise<void> {
    if (![epoch, attempt].every((n) => Number.isSafeInteger(n) && n >= 1)) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        `a fence claim needs a failover and an attempt >= 1, got ${String(epoch)} and ${String(attempt)}`,
      );
    }
    const mine: Fence = { epoch, attempt, holderTag: this.holderTag };
    const fence = await this.records.raise(contextId, mine, this.holder);
    if (FENCES.compare(fence, mine) === 0) return;
    const holder = (await this.records.contentOf(contextId, fence)) || 'another worker';
    throw new FabricError(
      'STALE_HANDLE',
      `context ${contextId} was adopted by ${holder.slice(0, 200)} (failover ${fence.epoch}, attempt ${fence.attempt}), ` +
        `after this claim (failover ${epoch}, attempt ${attempt})`,
    );
  }

  /** Whether this worker still holds the context: no fence, or the latest fence names this worker. One listing. */
  async stillHolder(contextId: string): Promise<boolean> {
    const fence = await this.records.highest(contextId);
    return fence === undefined || fence.holderTag === this.holderTag;
  }
}
