// Grants live beside the cold tier, in the store every worker reaches (a directory or a bucket), so a
// worker that adopts a context after another one died can still check who may touch it. One small sealed record per context
// (ContextRecords, record-seal.ts: a grant no worker wrote is refused), created once: a grant is never
// replaced, so two workers creating the same context id at once cannot leave the second one's grant over
// the first one's context. A grant names the context's tenant and owning agent and holds no secret:
// capabilities are checked against it (src/agent-memory/capability-check.ts).
import type { BlobStore } from '../blob-store/blob-store';
import { FabricError } from '../fabric/errors';
import { ContextRecords } from './context-records';
import type { RecordSeal } from './record-seal';

/** Who may touch a context, as recorded by the worker that created it. Holds no secret. */
export interface Grant {
  contextId: string;
  tenant: string;
  agentId: string;
  /** The fork that created the context (its child token's `fork` claim), when a fork did. */
  fork?: string;
}

export class GrantStore {
  private constructor(private readonly records: ContextRecords<Grant>) {}

  /** The grants under `prefix` ("grants/") of `store`. */
  static async open(store: BlobStore, prefix: string, seal: RecordSeal): Promise<GrantStore> {
    return new GrantStore(await ContextRecords.open(store, prefix, 'grant', parseGrant, seal));
  }

  /**
   * Grants the context unless it has a grant; durable before it returns (the context it guards is
   * durable from its first checkpoint on). True when this call created it, false when the same grant
   * was there already (a retry); PERMISSION_DENIED, nothing changed, when another agent or tenant holds it.
   */
  async put(grant: Grant): Promise<boolean> {
    const mine: Grant = {
      contextId: grant.contextId,
      tenant: grant.tenant,
      agentId: grant.agentId,
      ...(grant.fork === undefined ? {} : { fork: grant.fork }),
    };
    const onFile = await this.records.create(mine);
    if (onFile === mine) return true;
    if (onFile.tenant === mine.tenant && onFile.agentId === mine.agentId && onFile.fork === mine.fork) return false;
    throw new FabricError('PERMISSION_DENIED', `context ${grant.contextId} is already granted to another agent`);
  }

  /** The grant of a context; undefined if there is none. Read every time: another worker may have released it. */
  get(contextId: string): Promise<Grant | undefined> {
    return this.records.get(contextId);
  }

  delete(contextId: string): Promise<void> {
    return this.records.delete(contextId);
  }
}

function parseGrant({ contextId, tenant, agentId, fork }: Record<string, unknown>): Grant | undefined {
  if (typeof contextId !== 'string' || typeof tenant !== 'string' || typeof agentId !== 'string') return undefined;
  if (fork !== undefined && typeof fork !== 'string') return undefined;
  return { contextId, tenant, agentId, ...(fork === undefined ? {} : { fork }) };
}
