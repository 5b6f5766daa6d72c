// What a GPU worker's lease workflow (worker-lease.ts) and the worker's side of it (src/plugin/worker-lease.ts)
// share: the workflow's type and input, the activities it calls and what a held agent looks like in the
// lease's heartbeats. Types and constants only, so both sides import it without pulling in the other.

export const WORKER_LEASE_WORKFLOW_TYPE = 'workerLeaseWorkflow';

/** An agent whose context the worker holds: enough to tell its workflow that the holder is gone, no token. */
export interface LeasedAgent {
  workflowId: string;
  /** custodyProof of the custodian token that agent's workflow showed the worker (definitions.ts). */
  proof: string;
}

export interface WorkerLeaseInput {
  /** The worker's own queue: where the lease's heartbeat runs, and the holder its agents recorded. */
  holder: string;
  /** Silence from the worker for this long ends the lease: its agents are told the holder is gone. */
  heartbeatTimeoutMs: number;
}

/** How a lease's heartbeat ended on a live worker. */
export type LeaseEnd = 'stopped' | 'renew';

export interface WorkerLeaseActivities {
  /**
   * Runs on the worker's own queue for as long as the worker does, heartbeating the agents it holds
   * (LeasedAgent[]) as its details. Returns 'stopped' when the worker stops, 'renew' after a while so
   * that the lease's history stays short.
   */
  kvfabricHoldLease(): Promise<LeaseEnd>;
  /** Runs on the shared queue, on a live worker: tells each agent's workflow that `holder` is gone. */
  kvfabricHolderLost(holder: string, agents: LeasedAgent[]): Promise<number>;
}
