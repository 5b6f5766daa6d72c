// For a user's own workflow that drives a kvfabric agent (docs/agents.md#planned-wake-ups): say when the
// agent's context is needed again, or sleep and find it back in the engine when the sleep ends. The plan
// is the signal `wake` to the agent's workflow (a workflow can signal another, not update it), carrying
// the proof of the custodian token the user's workflow started the agent with (`input.capability`),
// never the token. Exported as `kvfabric/workflows/child`, beside startAgentChild.
import { type Duration, msToNumber } from '@temporalio/common/lib/time';
import { getExternalWorkflowHandle, sleep } from '@temporalio/workflow';

import { agentWorkflowId } from '../identity/agent-identity';
import { type AgentInput, custodyProof, wakeSignal } from './definitions';

/**
 * The agent, as the workflow that started it knows it: its id and its custodian token.
 * @experimental
 */
export type OwnedAgent = Pick<AgentInput, 'agentId' | 'capability'>;

/**
 * Plans the agent's wake-up at `at` (workflow time, ms), replacing any earlier plan; null cancels it.
 * @experimental
 */
export function planWake(agent: OwnedAgent, at: number | null): Promise<void> {
  return getExternalWorkflowHandle(agentWorkflowId(agent.agentId)).signal(wakeSignal, { at, proof: custodyProof(agent.capability) });
}

/**
 * Sleeps `duration`; the agent's context is brought back so that it is in the engine when the sleep ends.
 * @experimental
 */
export async function sleepThenWake(agent: OwnedAgent, duration: Duration): Promise<void> {
  await planWake(agent, Date.now() + msToNumber(duration));
  await sleep(duration);
}
