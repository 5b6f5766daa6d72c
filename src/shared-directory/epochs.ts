// Per-context revocation: the lowest epoch a worker still accepts for a context. Release and hand-off
// raise it past the epoch of the token that did them, revoking every token minted before. Kept in the
// store all workers share (next to the grants) and kept after release: a replayed token of a
// released context stays refused. Raising is a monotonic maximum that holds across processes and
// machines (rising-records.ts): two raises at once, 2000 and 1000, leave 2000, never 1000.
import type { BlobStore } from '../blob-store/blob-store';
import { FabricError } from '../fabric/errors';
import type { RecordSeal } from './record-seal';
import { RisingRecords, type RisingValue } from './rising-records';

/** Epochs are non-negative integers up to 2^53: a release raises to a token's epoch + 1, and epochs reach 2^53 - 1. */
const MAX_EPOCH = 2 ** 53;
const EPOCH_NAME = /^(?:0|[1-9][0-9]{0,15})$/;

const EPOCHS: RisingValue<number> = {
  nameOf: (epoch) => String(epoch),
  valueOf: (name) => (EPOCH_NAME.test(name) && Number(name) <= MAX_EPOCH ? Number(name) : undefined),
  compare: (a, b) => a - b,
};

export class EpochStore {
  private constructor(private readonly records: RisingRecords<number>) {}

  /** The epochs under `prefix` ("epochs/") of `store`. */
  static async open(store: BlobStore, prefix: string, seal: RecordSeal): Promise<EpochStore> {
    return new EpochStore(await RisingRecords.open(store, prefix, 'epoch', EPOCHS, seal));
  }

  /**
   * 0 for a context never revoked. One listing, every time: another worker may have raised it.
   * INTEGRITY when the value fell below one this process read before, or below `recorded`, a value the
   * caller knows was raised (the agent's workflow keeps the one it last raised): an entry was deleted.
   */
  async minimum(contextId: string, recorded = 0): Promise<number> {
    checkEpoch(recorded);
    return (await this.records.highest(contextId, recorded > 0 ? recorded : undefined)) ?? 0;
  }

  /** Revokes every token of the context with an epoch below `minimum`; never lowers the record. Durable before it returns. */
  async raise(contextId: string, minimum: number): Promise<void> {
    checkEpoch(minimum);
    if (minimum === 0) return; // every context starts at 0
    await this.records.raise(contextId, minimum, contextId);
  }
}

function checkEpoch(epoch: number): void {
  if (!Number.isInteger(epoch) || epoch < 0 || epoch > MAX_EPOCH)
    throw new FabricError('INVALID_ARGUMENT', `an epoch is an integer in [0, 2^53], got ${String(epoch)}`);
}
