// Per-context revocation: the lowest epoch a worker still accepts for a context. Release and hand-off
// raise it past the epoch of the token that did them, revoking every token minted before. Kept in the
// directory all workers share (next to the grants), one small file per context written atomically, and
// kept after release: a replayed token of a released context stays refused.
import { ContextRecords } from './context-records';

interface EpochRecord {
  contextId: string;
  minimum: number;
}

export class EpochStore {
  private constructor(private readonly records: ContextRecords<EpochRecord>) {}

  static async open(directory: string): Promise<EpochStore> {
    return new EpochStore(await ContextRecords.open(directory, 'epoch', parseRecord));
  }

  /** 0 for a context never revoked. Read every time: another worker may have raised it. */
  async minimum(contextId: string): Promise<number> {
    return (await this.records.get(contextId))?.minimum ?? 0;
  }

  /** Revokes every token of the context with an epoch below `minimum`; never lowers the record. */
  async raise(contextId: string, minimum: number): Promise<void> {
    if (minimum <= (await this.minimum(contextId))) return;
    await this.records.put({ contextId, minimum });
  }
}

function parseRecord({ contextId, minimum }: Record<string, unknown>): EpochRecord | undefined {
  return typeof contextId === 'string' && Number.isSafeInteger(minimum) ? { contextId, minimum: minimum as number } : undefined;
}
