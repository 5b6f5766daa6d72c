// The worker's side of its lease (src/workflows/worker-lease.ts): an agent learns that its holder died
// within about LEASE_HEARTBEAT_TIMEOUT_MS of the death, whether or not a call is waiting, instead of
// holderLossMs after its next call. The worker starts its lease workflow when it runs; the lease's
// heartbeat activity runs here, on the worker's own queue, and names the agents this worker holds in each
// heartbeat. A heartbeat that stops (a kill, a crash, a frozen process) times the activity out at the
// server, and a live worker then tells those agents (kvfabricHolderLost, on the shared queue). A lease
// that the server took for lost while this worker lives (a long pause) is started again.
import { randomBytes } from 'node:crypto';

import { Context } from '@temporalio/activity';
import { WorkflowIdReusePolicy, type Client } from '@temporalio/client';

import { toApplicationFailure } from '../activities/failures';
import type { AgentMemory } from '../agent-memory/agent-memory';
import { FabricError } from '../fabric/errors';
import { AGENT_WORKFLOW_TASK_TIMEOUT_MS } from '../workflows/task-timeout';
import {
  WORKER_LEASE_WORKFLOW_TYPE,
  type LeaseEnd,
  type LeasedAgent,
  type WorkerLeaseActivities,
  type WorkerLeaseInput,
} from '../workflows/worker-lease-definitions';
import { leasedAgents, tellHolderLeft } from './handover';

/**
 * Silence after which a worker is taken for dead. The server hears a heartbeat at least every 2 s
 * (liveness.ts), so this is three missed heartbeats and more: a dead or frozen process, not a busy one (a
 * worker's turns run off its event loop). A false alarm moves every agent of the worker (a restore from
 * disk each, and with durability 'on-offload' the turns only its memory had), so this stays well above a
 * pause; the bound it serves is 15 s from a death to the next answer: this, plus two 2 s task timeouts at
 * worst (the lease's and the agent's tasks may both have been the dead worker's), plus the adoption.
 */
export const LEASE_HEARTBEAT_TIMEOUT_MS = 8000;
/** How often the lease heartbeats when nothing changed. */
const LEASE_BEAT_MS = 1000;
/** How often the lease looks at what the worker holds: a change is heartbeated at once. */
const LEASE_LOOK_MS = 250;
/**
 * The holder's Worker sends heartbeats at most this far apart (its throttle, worker-plugin.ts): what the
 * server keeps of a lease is at most this old, so an agent held for longer than this is named at a death.
 */
export const LEASE_NEWS_MS = 1000;
/** A lease's activity returns after this long and its workflow continues as new: its history stays short. */
const LEASE_RENEW_MS = 60 * 60 * 1000;
/** The updates to a dead worker's agents get this long together. */
const TELL_AGENTS_MS = 30_000;

export interface WorkerLease {
  /** For the holder's own queue. */
  holderActivities: Pick<WorkerLeaseActivities, 'kvfabricHoldLease'>;
  /** For the shared queue. */
  sharedActivities: Pick<WorkerLeaseActivities, 'kvfabricHolderLost'>;
  /**
   * Starts the lease workflow; again whenever the server takes the lease for lost while this worker runs.
   * `serving`: whether the worker still takes work; once it does not, the lease ends within a beat.
   */
  start(client: Client, sharedQueue: string, serving: () => boolean): Promise<void>;
  /** The worker stops: its lease ends at once (its drain tells the agents: handover.ts). */
  stop(): void;
}

export function workerLease(holder: string, memory: AgentMemory, log: (message: string, meta?: object) => void): WorkerLease {
  let running = false;
  let serving: () => boolean = () => running;
  let restart: (() => void) | undefined;
  // The lease workflows this worker started (ids unguessable): its heartbeat runs for those only, so that
  // a lease somebody else starts against this worker's queue learns nothing of the agents it holds.
  const ownLeases = new Set<string>();
  // The SDK cancels a running activity only at the end of a shutdown's grace time: the lease must end
  // when the shutdown begins, or the worker's drain would wait for it.
  let stopped!: () => void;
  const stopping = new Promise<void>((resolve) => (stopped = resolve));

  const startLease = async (client: Client, sharedQueue: string): Promise<void> => {
    const input: WorkerLeaseInput = { holder, heartbeatTimeoutMs: LEASE_HEARTBEAT_TIMEOUT_MS };
    const workflowId = `kvfabric-lease-${holder}-${randomBytes(12).toString('hex')}`;
    ownLeases.add(workflowId);
    await client.workflow.start(WORKER_LEASE_WORKFLOW_TYPE, {
      args: [input],
      taskQueue: sharedQueue,
      workflowId,
      workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
      // As an agent's: a task taken by a dead worker's open poll waits this long, not the SDK's 10 s.
      workflowTaskTimeout: AGENT_WORKFLOW_TASK_TIMEOUT_MS,
    });
  };

  return {
    holderActivities: {
      async kvfabricHoldLease(): Promise<LeaseEnd> {
        const context = Context.current();
        const leaseId = context.info.workflowExecution?.workflowId ?? '';
        if (!ownLeases.has(leaseId))
          throw toApplicationFailure(new FabricError('PERMISSION_DENIED', `${leaseId} is not a lease this worker started`));
        const renewAt = Date.now() + LEASE_RENEW_MS;
        let told = '';
        let toldAt = 0;
        try {
          while (Date.now() < renewAt) {
            if (!running || !serving()) return 'stopped';
            const agents = leasedAgents(memory, memory.heldContextIds());
            const news = agents.map((agent) => agent.workflowId).join('\n');
            if (news !== told || Date.now() - toldAt >= LEASE_BEAT_MS) {
              context.heartbeat(agents);
              told = news;
              toldAt = Date.now();
            }
            const beat = context.sleep(LEASE_LOOK_MS);
            beat.catch(() => undefined); // a cancellation after the race was won by `stopping` is nobody's to see
            await Promise.race([beat, stopping]);
          }
          return 'renew';
        } catch (err) {
          const details = context.cancellationDetails;
          if (running && details && !details.workerShutdown && !details.cancelRequested) restart?.();
          throw err;
        }
      },
    },
    sharedActivities: {
      async kvfabricHolderLost(lostHolder: string, agents: LeasedAgent[]): Promise<number> {
        const report = await tellHolderLeft(Context.current().client, lostHolder, agents, Date.now() + TELL_AGENTS_MS);
        Context.current().log.info('told the agents of a dead GPU worker that it is gone', {
          holder: lostHolder,
          agents: report.agents,
          failed: report.failed.length,
        });
        return report.agents;
      },
    },
    async start(client, sharedQueue, isServing) {
      running = true;
      serving = isServing;
      restart = () => {
        log('kvfabric GPU worker lease lost while the worker runs (a long pause?): starting a new one', { holder });
        startLease(client, sharedQueue).catch((err: unknown) => log('kvfabric GPU worker could not start a new lease', { holder, err }));
      };
      await startLease(client, sharedQueue);
    },
    stop() {
      running = false;
      stopped();
    },
  };
}
