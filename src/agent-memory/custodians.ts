// The custodian token each context's workflow last showed this worker (with its allocation, a failover, a
// timer's move, or named by the fork or renewal that made it current), and that workflow's id: what the
// worker proves itself with when it leaves (src/plugin/handover.ts). Kept in memory only, as every call's
// token is while it runs; never logged or written anywhere.
import { CUSTODY, type CapabilityClaims } from '../security/claims';

/** A context's workflow and the custodian token it carries. */
export interface Custody {
  workflowId: string;
  token: string;
}

export class Custodians {
  private readonly byContext = new Map<string, Custody>();

  /** A token the worker admitted (claims verified): kept when it is a custodian, `custody` its only right. */
  admitted(contextId: string, token: unknown, claims: CapabilityClaims): void {
    if (typeof token === 'string' && claims.rights.length === 1 && claims.rights[0] === CUSTODY) this.named(contextId, token, claims.wf);
  }

  /** A custodian token a check confirmed for the context's workflow (a fork's child, a renewal's). */
  named(contextId: string, token: string, workflowId: string): void {
    this.byContext.set(contextId, { workflowId, token });
  }

  of(contextId: string): Custody | undefined {
    return this.byContext.get(contextId);
  }

  forget(contextId: string): void {
    this.byContext.delete(contextId);
  }
}
