// A GPU worker's lease: how an agent learns that its holder died without a call having to wait for it.
// Each GPU worker starts one of these on the shared queue when it runs (src/plugin/worker-lease.ts). The
// workflow runs one long activity on the worker's own queue, which heartbeats the agents that worker holds.
// When the worker dies, the server misses the heartbeats and times the activity out; its last heartbeat's
// details name the agents, and the workflow has a live worker tell each agent's workflow that the holder
// is gone (the update holderLeft, with the custodian's proof, as a graceful stop does: holder-left.ts).
// The next call on such an agent then adopts its context elsewhere at once, and a call already waiting on
// the dead holder's queue stops waiting. A worker that stops gracefully ends its lease itself.
import { ActivityFailure, TimeoutFailure, continueAsNew, log, proxyActivities } from '@temporalio/workflow';

import type { LeasedAgent, WorkerLeaseActivities, WorkerLeaseInput } from './worker-lease-definitions';

/** The heartbeat's attempt: renewed long before this (LeaseEnd 'renew'); the bound only ends a lost one. */
const LEASE_ATTEMPT_MS = 2 * 60 * 60 * 1000;
/** Telling a dead worker's agents: each update is short; a stuck one only leaves its agent to holderLossMs. */
const TELL_AGENTS_MS = 60_000;

export async function workerLeaseWorkflow(input: WorkerLeaseInput): Promise<void> {
  const { kvfabricHoldLease } = proxyActivities<WorkerLeaseActivities>({
    taskQueue: input.holder,
    startToCloseTimeout: LEASE_ATTEMPT_MS,
    heartbeatTimeout: input.heartbeatTimeoutMs,
    retry: { maximumAttempts: 1 },
  });
  const { kvfabricHolderLost } = proxyActivities<WorkerLeaseActivities>({
    startToCloseTimeout: TELL_AGENTS_MS,
    retry: { maximumAttempts: 3 },
  });
  let end;
  try {
    end = await kvfabricHoldLease();
  } catch (err) {
    const agents = heldAtDeath(err);
    if (!agents) return; // cancelled or failed on a live worker: not a death, nothing to tell
    log.warn('GPU worker gone: its lease heartbeat timed out; telling its agents', { holder: input.holder, agents: agents.length });
    if (agents.length > 0) await kvfabricHolderLost(input.holder, agents);
    return;
  }
  if (end === 'renew') await continueAsNew<typeof workerLeaseWorkflow>(input);
}

/** The agents named by the last heartbeat of a lease whose heartbeat timed out; undefined for any other end. */
function heldAtDeath(err: unknown): LeasedAgent[] | undefined {
  if (!(err instanceof ActivityFailure) || !(err.cause instanceof TimeoutFailure)) return undefined;
  const { timeoutType, lastHeartbeatDetails } = err.cause;
  if (timeoutType !== 'HEARTBEAT' && timeoutType !== 'START_TO_CLOSE') return undefined;
  return Array.isArray(lastHeartbeatDetails) ? lastHeartbeatDetails.filter(isLeasedAgent) : [];
}

function isLeasedAgent(value: unknown): value is LeasedAgent {
  if (typeof value !== 'object' || value === null) return false;
  const { workflowId, proof } = value as Record<string, unknown>;
  return typeof workflowId === 'string' && typeof proof === 'string';
}
