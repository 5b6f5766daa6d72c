// Whose KV an AI SDK model call continues: the workflow run that made the call, as the activity running it
// reports (the Temporal server hands an activity its workflow's execution; workflow code cannot choose
// it). Not providerOptions: those are whatever the workflow code passes, so one workflow could name
// another's KV with them. A run id is the server's own UUID, so a workflow started again under the same
// id never continues the KV of the run before it (continue-as-new starts a new context too).
import { createHash } from 'node:crypto';

import { Context } from '@temporalio/activity';

import { FabricError } from '../fabric/errors';
import { checkTenantName } from '../identity/agent-identity';

export interface ModelCallOwner {
  namespace: string;
  workflowId: string;
  runId: string;
  /** The namespace: Temporal's own isolation boundary is kvfabric's tenant for AI SDK agents. */
  tenant: string;
}

/** The prefix of every AI SDK context id. */
export const MODEL_CALL_CONTEXT_PREFIX = 'ai-sdk/';

/**
 * The context id of an owner's KV. Its '/' is outside the agent-id alphabet (identity/agent-identity.ts),
 * which capabilities are checked against, so no kvfabric agent can be named after an AI SDK context.
 */
export function modelCallContextId(owner: ModelCallOwner): string {
  const digest = createHash('sha256')
    .update(JSON.stringify([owner.namespace, owner.workflowId, owner.runId]))
    .digest('hex');
  return `${MODEL_CALL_CONTEXT_PREFIX}${digest.slice(0, 40)}`;
}

/** The owner of the activity running now; INVALID_STATE outside an activity (a model call runs in `invokeModel`). */
export function currentModelCallOwner(): ModelCallOwner {
  let info: Context['info'];
  try {
    info = Context.current().info;
  } catch {
    throw new FabricError(
      'INVALID_STATE',
      "kvfabric's model provider runs inside a Temporal activity (@temporalio/ai-sdk's invokeModel): " +
        'its KV belongs to the calling workflow',
    );
  }
  const execution = info.workflowExecution;
  if (!execution) throw new FabricError('INVALID_STATE', 'a standalone activity has no workflow to own its KV');
  const { namespace } = info;
  checkTenantName(namespace);
  return { namespace, workflowId: execution.workflowId, runId: execution.runId, tenant: namespace };
}
