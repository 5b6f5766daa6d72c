// A holder's last word, when it leaves on purpose or is found dead. Once the drain has written a context to
// disk (drain.ts), the worker sends its agent's workflow the update `holderLeft` through its own
// connection, so that the agent's next call adopts the context on another worker at once instead of
// waiting out holderLossMs on this worker's queue, which nobody serves any more
// (src/workflows/holder-left.ts). A worker that died says nothing; its lease does it for it, on a live
// worker (worker-lease.ts), with the same updates. The update carries the proof of the custodian token
// that workflow showed the holder (custodyProof), never the token. A context whose workflow showed no
// custodian here (an AI SDK call's KV) has no agent to tell. Another worker must run the agent's workflow
// task for the update to land; one that is not done by the deadline costs only time: that agent fails
// over after holderLossMs, as before.
import { Client, type ConnectionLike } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';

import type { AgentMemory } from '../agent-memory/agent-memory';
import { custodyProof, holderLeftUpdate } from '../workflows/definitions';
import type { LeasedAgent } from '../workflows/worker-lease-definitions';

/** The updates get this long together: the process is on its way out. */
const HANDOVER_DEADLINE_MS = 5_000;

export interface HandoverReport {
  /** Agents told. */
  agents: number;
  /** Workflows of the agents that could not be told (refused, workflow ended, no workflow worker in time). */
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
  return tellHolderLeft(client, holder, leasedAgents(memory, drained), Date.now() + HANDOVER_DEADLINE_MS);
}

/** The agents of these contexts, as the holder's lease and handover name them. */
export function leasedAgents(memory: AgentMemory, contextIds: readonly string[]): LeasedAgent[] {
  const agents: LeasedAgent[] = [];
  for (const contextId of contextIds) {
    const custody = memory.custodyOf(contextId);
    if (custody) agents.push({ workflowId: custody.workflowId, proof: custodyProof(custody.token) });
  }
  return agents;
}

/** Sends each agent's workflow `holderLeft` for `holder`, all at once, until `deadline` (epoch ms). */
export async function tellHolderLeft(
  client: Client,
  holder: string,
  agents: readonly LeasedAgent[],
  deadline: number,
): Promise<HandoverReport> {
  const report: HandoverReport = { agents: 0, failed: [] };
  await Promise.all(
    agents.map(async ({ workflowId, proof }) => {
      try {
        await client.withDeadline(deadline, () =>
          client.workflow.getHandle(workflowId).executeUpdate(holderLeftUpdate, { args: [{ holder, proof }] }),
        );
        report.agents++;
      } catch {
        report.failed.push(workflowId);
      }
    }),
  );
  return report;
}
