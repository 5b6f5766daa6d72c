// Grants live beside the cold tier, in a directory every worker reaches, so a worker that adopts a
// context after another one died can still check who may touch it. One small JSON file per context
// (ContextRecords). A grant names the context's tenant and owning agent and holds no secret:
// capabilities are checked against it (src/agent-memory/capability-check.ts).
import { ContextRecords } from './context-records';

/** Who may touch a context, as recorded by the worker that created it. Holds no secret. */
export interface Grant {
  contextId: string;
  tenant: string;
  agentId: string;
}

export class GrantStore {
  private constructor(private readonly records: ContextRecords<Grant>) {}

  static async open(directory: string): Promise<GrantStore> {
    return new GrantStore(await ContextRecords.open(directory, 'grant', parseGrant));
  }

  /** Durable before it returns: the context it guards is durable from its first checkpoint on. */
  put(grant: Grant): Promise<void> {
    return this.records.put({ contextId: grant.contextId, tenant: grant.tenant, agentId: grant.agentId });
  }

  /** The grant of a context; undefined if there is none. Read every time: another worker may have released it. */
  get(contextId: string): Promise<Grant | undefined> {
    return this.records.get(contextId);
  }

  delete(contextId: string): Promise<void> {
    return this.records.delete(contextId);
  }
}

function parseGrant({ contextId, tenant, agentId }: Record<string, unknown>): Grant | undefined {
  if (typeof contextId !== 'string' || typeof tenant !== 'string' || typeof agentId !== 'string') return undefined;
  return { contextId, tenant, agentId };
}
