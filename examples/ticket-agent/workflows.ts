// A support ticket as a business process: it starts an agent for the ticket (a child workflow on
// kvfabric's queue), asks it the customer's question, parks the agent's memory on disk while the customer
// is away, brings it back when the customer writes again, asks the follow-up and releases the agent.
// Workflow code: deterministic, activity types only. What its history holds of the agent: the id, the
// tenant and the child's start input, whose token is the agent's custodian (custody only: it moves the
// agent's context between tiers and workers, never reads, resumes, turns or releases it), the same token
// the agent's own history holds. In your project the import is 'kvfabric/workflows/child'.
import { condition, defineQuery, defineSignal, proxyActivities, setHandler } from '@temporalio/workflow';

import { startAgentChild } from '../../src/workflows/agent-child';
import type { TicketActivities } from './activities';

/** kvfabric's shared queue: the agents run there, on workers holding their KV; tickets run on a queue of their own. */
export const AGENT_QUEUE = 'kvfabric';
export const TICKET_QUEUE = 'tickets';

export interface Ticket {
  id: string;
  tenant: string;
  question: string;
}

export interface TicketTranscript {
  agentId: string;
  answer: string;
  /** Where the agent's context waited for the customer. */
  parkedOn: string;
  resumedFrom: string;
  resumeMs: number;
  followUp: string;
  followUpAnswer: string;
}

export const customerWrote = defineSignal<[string]>('customerWrote');
/** 'answering', 'waiting for the customer', 'closing' or 'closed'. */
export const ticketStage = defineQuery<string>('ticketStage');

const { newAgent, ask, park, bringBack, release } = proxyActivities<TicketActivities>({
  startToCloseTimeout: '5 minutes', // a turn may wait out a lost holder and a restore from disk
  retry: { maximumAttempts: 3 }, // each call carries a request id: a retry is answered once
});

export async function supportTicket(ticket: Ticket): Promise<TicketTranscript> {
  let stage = 'answering';
  let followUp: string | undefined;
  setHandler(ticketStage, () => stage);
  setHandler(customerWrote, (text) => {
    followUp = text;
  });

  const agent = { agentId: `ticket-${ticket.id}`, tenant: ticket.tenant };
  await startAgentChild(await newAgent(agent), { taskQueue: AGENT_QUEUE });
  const answer = await ask(agent, ticket.question);

  const parked = await park(agent); // the customer may take hours: the KV waits on disk, not on a GPU
  stage = 'waiting for the customer';
  // Within the custodian's lifetime (24 h by default): a longer wait renews the agent first (docs/security.md).
  const wrote = await condition(() => followUp !== undefined, '12 hours');
  stage = 'closing';
  if (!wrote) {
    await release(agent);
    stage = 'closed';
    throw new Error(`ticket ${ticket.id}: no word from the customer in 12 hours`);
  }
  const resumed = await bringBack(agent);
  const followUpAnswer = await ask(agent, followUp!);
  await release(agent);
  stage = 'closed';
  return {
    agentId: agent.agentId,
    answer,
    parkedOn: parked.tier,
    resumedFrom: resumed.lastResume?.from ?? 'nowhere',
    resumeMs: resumed.lastResume?.transferMs ?? 0,
    followUp: followUp!,
    followUpAnswer,
  };
}
