// A graceful stop's last word. Once the drain has written a context to disk (drain.ts), the worker sends
// its agent's workflow the update `holderLeft` through its own connection, so that the agent's next call
// adopts the context on another worker at once instead of waiting out holderLossMs on this worker's
// queue, which nobody serves any more (src/workflows/holder-left.ts). The update carries the proof of the
// custodian token that workflow showed this worker (custodyProof), never the token. A context whose
// workflow showed no custodian here (an AI SDK call's KV) has no agent to tell. Another worker must run the
// agent's workflow task for the update to land; one that is not done by the deadline costs only time:
// that agent fails over after holderLossMs, as before.
import { Client, type ConnectionLike } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';

import type { AgentMemory } from '../agent-memory/agent-memory';
import { custodyProof, holderLeftUpdate } from '../workflows/definitions';

/** The updates get this long together: the process is on its way out. */
const HANDOVER_DEADLINE_MS = 5_000;

export interface HandoverReport {
  /** Agents told. */
  agents: number;
  /** Contexts whose agents could not be told (refused, workflow ended, no workflow worker in time). */
  failed: string[];
}

export interface Handover {
  connection: ConnectionLike;
  namespace: string;
  dataConverter: DataConverter;
  /** This worker's own queue: the holder the agents' workflows recorded. */
  holder: string;
  memory: AgentMemory;
  /** The contexts the drain wrote. */
  drained: readonly string[];
}

export async function handOver({ connection, namespace, dataConverter, holder, memory, drained }: Handover): Promise<HandoverReport> {
  const client = new Client({ connection, namespace, dataConverter });
  const report: HandoverReport = { agents: 0, failed: [] };
  const deadline = Date.now() + HANDOVER_DEADLINE_MS;
  await Promise.all(
    drained.map(async (contextId) => {
      const custody = memory.custodyOf(contextId);
      if (!custody) return;
      try {
        await client.withDeadline(deadline, () =>
          client.workflow
            .getHandle(custody.workflowId)
            .executeUpdate(holderLeftUpdate, { args: [{ holder, proof: custodyProof(custody.token) }] }),
        );
        report.agents++;
      } catch {
        report.failed.push(contextId);
      }
    }),
  );
  return report;
}
