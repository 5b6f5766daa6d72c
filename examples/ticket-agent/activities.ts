// The ticket's activities: they talk to the ticket's agent through kvfabric's AgentClient. Each call's
// capability is minted here, for that call alone: the one right it needs, living as long as the call may
// take. None goes back to the workflow, so the ticket's history holds no caller's token; the agent's own
// history holds each call's (update arguments, sealed by the codec), and those expire within minutes.
// In your project the import is 'kvfabric/client'.
import { Context } from '@temporalio/activity';

import { AgentClient, agentConfig, modelNamed, type AgentInput, type AgentStatus } from '../../src/client';

/** A call's token outlives the longest the call may take (workflows.ts: 5 minutes to close) by a minute. */
export const CALL_TOKEN_LIFETIME_S = 6 * 60;

/** The agent a ticket talks to: its id and tenant are all the workflow knows of it. */
export interface TicketAgent {
  agentId: string;
  tenant: string;
}

type CallerRight = NonNullable<Parameters<AgentClient['mintCapability']>[2]>[number];

export type TicketActivities = ReturnType<typeof ticketActivities>;

/** `agents` holds the signing keys (KVFABRIC_SIGNING_KEYS): the process running these is the control plane. */
export function ticketActivities(agents: AgentClient) {
  const calls = new AgentClient(agents.client, agents.taskQueue, { ...agents.security, capabilityLifetimeS: CALL_TOKEN_LIFETIME_S });
  const acting = ({ agentId, tenant }: TicketAgent, right: CallerRight) => calls.agent(agentId, calls.mintCapability(agentId, tenant, [right]));
  // A retried attempt sends the same update id (the ticket's run and this activity): the agent answers it once.
  const once = () => {
    const { workflowExecution, activityId } = Context.current().info;
    return workflowExecution ? { requestId: `${workflowExecution.runId}/${activityId}` } : {};
  };

  return {
    /** The agent's start input. It carries the custodian token (custody only); the agent's own token is not kept. */
    async newAgent({ agentId, tenant }: TicketAgent): Promise<AgentInput> {
      const custodian = agents.mintCustodian(agents.mintCapability(agentId, tenant));
      return { agentId, tenant, capability: custodian, model: modelNamed('smollm2-135m'), config: agentConfig() };
    },

    async ask(agent: TicketAgent, message: string): Promise<string> {
      const { reply } = await acting(agent, 'turn').say(message, { maxTokens: 48 }, once());
      return reply.trim();
    },

    async park(agent: TicketAgent): Promise<AgentStatus> {
      return acting(agent, 'suspend').suspend('disk', once());
    },

    async bringBack(agent: TicketAgent): Promise<AgentStatus> {
      return acting(agent, 'resume').resume(once());
    },

    async release(agent: TicketAgent): Promise<void> {
      await acting(agent, 'release').release(once());
    },
  };
}
