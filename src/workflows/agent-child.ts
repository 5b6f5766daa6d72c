// For a user's own workflow: start a kvfabric agent as its child, with the memo and search attributes
// kvfabric's client gives an agent it starts. Not a workflow type (so not exported from index.ts); the
// package exports it as `kvfabric/workflows/child`. The agent outlives its parent unless told otherwise:
// its memory is what the parent's successors come back to. `input.capability` is the agent's custodian
// token (AgentClient.mintCustodian): the agent's own token stays with the activities that talk to it.
// `taskQueue`: kvfabric's queue when the parent runs on a queue of its own (a child inherits its parent's).
import { ParentClosePolicy, startChild, type ChildWorkflowHandle } from '@temporalio/workflow';

import { agentWorkflowId } from '../identity/agent-identity';
import { initialState, memoOf, searchAttributesOf } from './agent-state';
import { AGENT_WORKFLOW_TYPE, type AgentInput, type AgentWorkflow } from './definitions';
import { AGENT_WORKFLOW_TASK_TIMEOUT_MS } from './task-timeout';

/**
 * Starts the agent as a child of the calling workflow (see above).
 * @experimental Its options may grow (a child's id reuse policy, a priority).
 */
export function startAgentChild(
  input: AgentInput,
  options: { parentClosePolicy?: ParentClosePolicy; taskQueue?: string } = {},
): Promise<ChildWorkflowHandle<AgentWorkflow>> {
  return startChild<AgentWorkflow>(AGENT_WORKFLOW_TYPE, {
    workflowId: agentWorkflowId(input.agentId),
    args: [input],
    memo: memoOf(input),
    typedSearchAttributes: searchAttributesOf(input, initialState(input)),
    parentClosePolicy: options.parentClosePolicy ?? ParentClosePolicy.ABANDON,
    workflowTaskTimeout: AGENT_WORKFLOW_TASK_TIMEOUT_MS,
    ...(options.taskQueue === undefined ? {} : { taskQueue: options.taskQueue }),
  });
}
export { planWake, sleepThenWake, type OwnedAgent } from './plan-wake';
