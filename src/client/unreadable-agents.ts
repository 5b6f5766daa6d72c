// Agents no worker can read, ended instead of left failing their first workflow task forever. A worker
// whose payload codec keys are not the client's cannot convert the agent's input: the SDK fails the
// workflow task before any workflow code runs (so the workflow cannot fail itself), and Temporal retries
// it without end. Such a run has done nothing and holds nothing, so the client that finds it terminates
// it and reports the mismatch (codec-refusals.ts): at `start` when a worker polls the queue, else during
// the first call that waits on it.
import { setTimeout as sleep } from 'node:timers/promises';

import type { Client } from '@temporalio/client';

import { isFabricError, type FabricError } from '../fabric/errors';
import { agentWorkflowId } from '../identity/agent-identity';
import { firstWorkflowTask, mismatchError, type FirstTask } from './codec-refusals';
import { pollingWorkers } from './queue-workers';

/** How long `start` waits for a polling worker's first workflow task of the new agent. */
export const FIRST_TASK_WAIT_MS = 10_000;

type Refused = Extract<FirstTask, { outcome: 'refused' }>;

/**
 * Where workers poll `taskQueue`, waits (at most FIRST_TASK_WAIT_MS) for the new run's first workflow
 * task; throws PERMISSION_DENIED naming the key, after ending the run, when a codec refused it. With no
 * worker polling there is nothing to wait for: the agent starts when one comes. True when a worker ran
 * the first task.
 */
export async function confirmReadable(client: Client, taskQueue: string, agentId: string, runId: string): Promise<boolean> {
  if (!(await pollingWorkers(client, taskQueue))) return false;
  const deadline = Date.now() + FIRST_TASK_WAIT_MS;
  for (let waitMs = 20; ; waitMs = Math.min(waitMs * 2, 250)) {
    const first = await firstWorkflowTask(client, agentWorkflowId(agentId), runId);
    if (first.outcome === 'refused') throw await endUnreadable(client, agentId, runId, first);
    if (first.outcome !== 'pending' || Date.now() + waitMs > deadline) return first.outcome === 'completed';
    await sleep(waitMs);
  }
}

/**
 * While a call on an agent is pending (checked after 1 s, then less and less often): when the agent's
 * first workflow task keeps failing because a codec refused it, ends the run and rejects with
 * PERMISSION_DENIED (also kept in `found`: the pending call then fails "not found", and this is why),
 * instead of leaving the caller to the server's later "Workflow Task in failed state". Never settles otherwise; its
 * own failures end the watch.
 */
export async function watchForUnreadable(
  client: Client,
  agentId: string,
  found: { error?: FabricError },
  stop: AbortSignal,
): Promise<never> {
  const never = new Promise<never>(() => undefined);
  try {
    for (let waitMs = 1000; ; waitMs = Math.min(waitMs * 2, 30_000)) {
      await sleep(waitMs, undefined, { signal: stop });
      const { pendingWorkflowTask } = await client.workflowService.describeWorkflowExecution({
        namespace: client.options.namespace,
        execution: { workflowId: agentWorkflowId(agentId) },
      });
      if ((pendingWorkflowTask?.attempt ?? 0) < 2) continue; // no task, or its first attempt: nothing is failing
      const first = await firstWorkflowTask(client, agentWorkflowId(agentId));
      if (first.outcome === 'refused') {
        found.error = mismatchError(agentId, first.refusal, first.by, first.inputKeyId);
        throw await endUnreadable(client, agentId, undefined, first);
      }
      if (first.outcome === 'completed') return never; // it ran before: a later failure is not this
    }
  } catch (err) {
    if (isFabricError(err)) throw err;
    return never; // stopped, or the watch's own call failed: the call's own answer decides
  }
}

/** The latest run's first task, when the server turned a call away for failing workflow tasks; ends it if a codec refused it. */
export async function endIfUnreadable(client: Client, agentId: string): Promise<FabricError | undefined> {
  const first = await firstWorkflowTask(client, agentWorkflowId(agentId)).catch(() => undefined);
  return first?.outcome === 'refused' ? endUnreadable(client, agentId, undefined, first) : undefined;
}

/** Terminates a run whose first workflow task a codec refused; returns the error to throw. */
async function endUnreadable(client: Client, agentId: string, runId: string | undefined, first: Refused): Promise<FabricError> {
  const key = first.refusal.keyId ? ` '${first.refusal.keyId}'` : '';
  const reason =
    "kvfabric: no worker can read this agent's input (" +
    `${first.by === 'worker' ? 'the worker lacks' : "this client lacks the workers'"}` +
    ` payload codec key${key})`;
  await client.workflow
    .getHandle(agentWorkflowId(agentId), runId)
    .terminate(reason)
    .catch(() => undefined); // already closed: nothing left to end
  return mismatchError(agentId, first.refusal, first.by, first.inputKeyId);
}
