// Fencing of slow holders. A worker that stops answering (frozen, partitioned, swapping) is taken for
// dead: its agents' workflows fail over and another worker adopts their contexts from the cold tier.
// If the old holder wakes up mid-operation it must not write a manifest over the new holder's newer one.
// Each adoption claims the context with the failover's epoch (the workflow's failover count) and the
// activity attempt in a fence record in the shared directory (a later claim wins: a timed-out attempt of
// the adoption that a frozen worker runs late must not take the context back from the attempt that
// succeeded); a holder checks that no other holder claimed the context after it
// before every manifest write, and drops a context it has lost. Contexts never adopted have no fence.
// Fences stay after release (like revocation epochs): a holder waking after the release stays fenced.
// Check-then-write on a shared file system leaves a window of one manifest write; it is not a lock.
import { FabricError } from '../fabric/errors';
import { ContextRecords } from './context-records';

interface Fence {
  contextId: string;
  /** The failover that made `holder` the holder (1 for the first)... */
  epoch: number;
  /** ...and the attempt of its adoption activity that did. */
  attempt: number;
  holder: string;
}

export class HolderFences {
  private constructor(
    private readonly records: ContextRecords<Fence>,
    /** This worker's own task queue: its identity as a holder. */
    private readonly holder: string,
  ) {}

  static async open(directory: string, holder: string): Promise<HolderFences> {
    return new HolderFences(await ContextRecords.open(directory, 'fence', parseFence), holder);
  }

  /**
   * Claims the context for this worker at (epoch, attempt), before adopting it. STALE_HANDLE when a
   * later failover, or a later attempt of this one, already claimed it.
   */
  async claim(contextId: string, epoch: number, attempt: number): Promise<void> {
    const current = await this.records.get(contextId);
    if (current && (current.epoch > epoch || (current.epoch === epoch && current.attempt > attempt))) {
      throw new FabricError('STALE_HANDLE', `context ${contextId} was adopted by ${current.holder} (failover ${current.epoch}, attempt ${current.attempt}), after this claim (failover ${epoch}, attempt ${attempt})`);
    }
    if (current?.epoch === epoch && current.attempt === attempt && current.holder === this.holder) return;
    await this.records.put({ contextId, epoch, attempt, holder: this.holder });
  }

  /** Whether this worker still holds the context: no fence, or the fence names this worker. */
  async stillHolder(contextId: string): Promise<boolean> {
    const fence = await this.records.get(contextId);
    return fence === undefined || fence.holder === this.holder;
  }
}

function parseFence({ contextId, epoch, attempt, holder }: Record<string, unknown>): Fence | undefined {
  const counts = [epoch, attempt].every((n) => Number.isSafeInteger(n) && (n as number) >= 1);
  if (typeof contextId !== 'string' || typeof holder !== 'string' || !counts) return undefined;
  return { contextId, epoch: epoch as number, attempt: attempt as number, holder };
}
