// `start` waits for the new agent's allocation, so that an agent no worker can serve is refused where it
// is asked for. A worker's pool is made for one model (src/engines/models.ts): an agent of another is
// refused at allocation (INVALID_ARGUMENT, naming the worker's model), and the agent's workflow fails
// at once. Without this wait `start` succeeded and the next call found the agent ended.
// The outcome is read from the run's raw history (nothing decoded but the failure): the allocation is
// the run's first activity, so its completion is the agent's start, and the run failing first is the
// refusal. A failed run holds nothing (the refusal comes before any grant or block), and its id may be
// started again at once.
import { setTimeout as sleep } from 'node:timers/promises';

import type { Client } from '@temporalio/client';
import type { ProtoFailure } from '@temporalio/common';
import { decodeOptionalFailureToOptionalError } from '@temporalio/common/lib/internal-non-workflow';

import { FabricError } from '../fabric/errors';
import { agentWorkflowId } from '../identity/agent-identity';
import { typedCause } from './typed-failure';

/** How long `start` waits for the allocation once a worker has run the agent's first workflow task. */
export const ALLOCATION_WAIT_MS = 10_000;

/** Waits (at most ALLOCATION_WAIT_MS) for the run's allocation; throws the worker's refusal when the run failed instead. */
export async function confirmAllocated(client: Client, agentId: string, runId: string, modelName: string): Promise<void> {
  const deadline = Date.now() + ALLOCATION_WAIT_MS;
  for (let waitMs = 20; ; waitMs = Math.min(waitMs * 2, 250)) {
    const outcome = await allocationOutcome(client, agentId, runId);
    if (outcome.outcome === 'failed') throw await refusalOf(client, agentId, modelName, outcome.failure);
    if (outcome.outcome !== 'pending' || Date.now() + waitMs > deadline) return;
    await sleep(waitMs);
  }
}

type Outcome = { outcome: 'allocated' | 'pending' | 'closed' } | { outcome: 'failed'; failure: ProtoFailure | null | undefined };

async function allocationOutcome(client: Client, agentId: string, runId: string): Promise<Outcome> {
  const { history } = await client.workflowService.getWorkflowExecutionHistory({
    namespace: client.options.namespace,
    execution: { workflowId: agentWorkflowId(agentId), runId },
    maximumPageSize: 100,
  });
  for (const event of history?.events ?? []) {
    if (event.activityTaskCompletedEventAttributes) return { outcome: 'allocated' };
    const failed = event.workflowExecutionFailedEventAttributes;
    if (failed) return { outcome: 'failed', failure: failed.failure };
    // Ended some other way (terminated, timed out): not a refusal this wait can name.
    if (event.workflowExecutionTerminatedEventAttributes || event.workflowExecutionTimedOutEventAttributes) return { outcome: 'closed' };
  }
  return { outcome: 'pending' };
}

async function refusalOf(
  client: Client,
  agentId: string,
  modelName: string,
  failure: ProtoFailure | null | undefined,
): Promise<FabricError> {
  const error = await decodeOptionalFailureToOptionalError(client.options.loadedDataConverter, failure).catch((err: unknown) => err);
  const typed = typedCause(error);
  if (!typed)
    return new FabricError(
      'UNAVAILABLE',
      `agent ${agentId} failed at its start: ${error instanceof Error ? error.message : String(error)}`,
    );
  return new FabricError(typed.type, `cannot start agent ${agentId} with model ${modelName}: ${typed.message}`);
}
