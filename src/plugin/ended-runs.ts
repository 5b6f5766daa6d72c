// Whether an AI SDK agent's workflow run has ended, as the Temporal server says: closed (completed,
// failed, cancelled, terminated, timed out, continued as new), or gone (its retention passed). What the
// housekeeping asks before it frees a run's KV; a server it cannot reach says nothing, so nothing is freed.
import { Client, WorkflowNotFoundError, type ConnectionLike } from '@temporalio/client';

import type { ModelCallOwner } from '../ai-sdk/model-call-owner';

export function endedRuns(connection: ConnectionLike): (owner: ModelCallOwner) => Promise<boolean> {
  const clients = new Map<string, Client>();
  return async (owner) => {
    let client = clients.get(owner.namespace);
    if (!client) {
      client = new Client({ connection, namespace: owner.namespace });
      clients.set(owner.namespace, client);
    }
    try {
      const { status } = await client.workflow.getHandle(owner.workflowId, owner.runId).describe();
      return status.name !== 'RUNNING';
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return true;
      throw err;
    }
  };
}
