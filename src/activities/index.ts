// The activities a GPU worker runs for agent workflows, one per operation (src/operations), each one call
// into AgentMemory, which admits the call and returns the operation's whole result. Placement activities
// run on the shared task queue: whichever worker takes one holds the context afterwards and answers with
// its own worker-specific queue. Holder activities run on that queue. This adapter adds what Temporal
// brings: who is calling (the workflow run, from the activity context), at-most-once application per
// operation id (the journal), heartbeats, and FabricErrors reported by code.
import { createHash } from 'node:crypto';

import { Context, log } from '@temporalio/activity';

import type { AgentMemory, RunAdmitted } from '../agent-memory/agent-memory';
import type { Presented } from '../agent-memory/capability-check';
import { agentWorkflowId } from '../identity/agent-identity';
import { OPERATIONS, type Operation, type OperationRow } from '../operations/operations';
import { withFailureCodes } from './failures';
import { withHeartbeat, type Progress } from './heartbeat';
import { OperationJournal, type Admission } from './operation-journal';
import type {
  AllocateRequest,
  Allocation,
  ContextRequest,
  ContextSnapshot,
  ForkRequest,
  ForkResult,
  HolderActivities,
  LocalActivities,
  LocalResumeRequest,
  LocalTurnRequest,
  Placement,
  PlacementActivities,
  RecoverRequest,
  ReleaseResult,
  RenewRequest,
  RenewResult,
  ResumeRequest,
  ResumeResult,
  SuspendRequest,
  SuspendResult,
  TurnRequest,
  TurnResult,
} from './types';

export type * from './types';
export { OperationJournal } from './operation-journal';

export interface ActivityHooks {
  /**
   * Runs after an operation is applied and recorded, before its result goes back. Tests throw here once
   * to make Temporal retry an activity whose side effect already happened. `activity` is the activity's
   * name: the operation's, or the local activity's (`resumeIfHolder`, `turnIfHolder`).
   */
  afterApplied?(activity: string, request: ContextRequest): void;
}

/** How the adapter runs one operation's call. */
interface Call {
  operation: Operation;
  /** The activity's name, when it is not the operation's (a local activity). */
  activity?: string;
  /** What the heartbeat reports while it runs. */
  progress?: Progress;
}

export function createActivities(options: {
  memory: AgentMemory;
  /** This worker's own task queue, returned by placement activities. */
  holder: string;
  /** Whether this worker also runs agent workflows (and with them the local activities). */
  runsWorkflows?: boolean;
  journal?: OperationJournal;
  hooks?: ActivityHooks;
}): { placement: PlacementActivities; holder: HolderActivities; local: LocalActivities } {
  const { memory, holder, hooks } = options;
  const holderRunsWorkflows = options.runsWorkflows === true;
  const journal = options.journal ?? new OperationJournal();

  /**
   * A retry finds the outcome recorded for its operation id and binding, once it is admitted like the
   * first call; only a retry from the same workflow run with the same token finds it at all. A first call
   * goes to `apply`, which AgentMemory runs once the call is admitted (nothing is recorded for a refused
   * call): the journal applies it at most once, with heartbeats. Then the after-applied hook.
   */
  function runOperation<T>(how: Call, request: ContextRequest, apply: (call: Presented, run: RunAdmitted) => Promise<T>): Promise<T> {
    const activity = how.activity ?? how.operation;
    const progress = how.progress ?? { phase: how.operation };
    return withFailureCodes(async () => {
      const call = presented(request, how.operation);
      const admission = admissionOf(request);
      const recorded = journal.recorded<T>(request.agentId, request.operationId, admission);
      if (recorded !== undefined) return answerRetry(activity, request, call, recorded);
      const run: RunAdmitted = (work) =>
        journal.run(request.agentId, request.operationId, admission, () =>
          withHeartbeat(
            () => progress,
            async () => {
              const result = await work();
              if (endsContext(how.operation)) journal.end(request.agentId, request.operationId);
              return result;
            },
          ),
        );
      const result = await apply(call, run);
      hooks?.afterApplied?.(activity, request);
      return result;
    });
  }

  /** A retry's recorded outcome, once the retry is admitted like the first call (AgentMemory.admitRetry). */
  async function answerRetry<T>(activity: string, request: ContextRequest, call: Presented, recorded: Promise<T>): Promise<T> {
    const outcome = await recorded;
    await memory.admitRetry(call);
    hooks?.afterApplied?.(activity, request);
    return outcome;
  }

  const placement: PlacementActivities = {
    allocate(request: AllocateRequest): Promise<Allocation> {
      return withFailureCodes(async () => {
        const call = presented(request, 'allocate');
        const admission = admissionOf(request);
        const recorded = journal.recorded<Allocation>(request.agentId, request.operationId, admission);
        if (recorded !== undefined) return answerRetry('allocate', request, call, recorded);
        // Admitted inside: the grant is made there (AgentMemory.allocate refuses an id granted to someone else).
        const result = await journal.run(request.agentId, request.operationId, admission, async () => {
          const { created, ...allocated } = await memory.allocate(call, request);
          // Only once admitted: an id used before starts with no record of it, and no caller can wipe another's.
          if (created) journal.end(request.agentId, request.operationId);
          log.info('context allocated', { agentId: request.agentId, tenant: request.tenant, holder });
          return { holder, holderRunsWorkflows, ...allocated };
        });
        hooks?.afterApplied?.('allocate', request);
        return result;
      });
    },

    recover(request: RecoverRequest): Promise<Placement> {
      return runOperation({ operation: 'recover' }, request, async (call, run) => {
        const attempt = Context.current().info.attempt;
        const snapshot = await memory.recover(call, { minVersion: request.minVersion, epoch: request.epoch, attempt }, run);
        log.info('context recovered from the cold tier', { agentId: request.agentId, holder });
        return { holder, holderRunsWorkflows, ...snapshot };
      });
    },

    retire(request: ContextRequest): Promise<ReleaseResult> {
      return runOperation({ operation: 'retire' }, request, async (call, run) => {
        const result = await memory.retire(call, run);
        log.info('context retired without its holder', { agentId: request.agentId, holder });
        return result;
      });
    },
  };

  const holderActivities: HolderActivities = {
    turn(request: TurnRequest): Promise<TurnResult> {
      return turn('turn', request);
    },

    resume(request: ResumeRequest): Promise<ResumeResult> {
      return resume('resume', request);
    },

    wake(request: ResumeRequest): Promise<ResumeResult> {
      return wake('wake', request);
    },

    suspend(request: SuspendRequest): Promise<SuspendResult> {
      const progress = { phase: `suspend to ${request.tier}` };
      return runOperation({ operation: 'suspend', progress }, request, (call, run) => memory.suspend(call, request, run));
    },

    fork(request: ForkRequest): Promise<ForkResult> {
      return runOperation({ operation: 'fork' }, request, (call, run) => memory.fork(call, presentedChild(request), request, run));
    },

    unfork(request: ForkRequest): Promise<ContextSnapshot> {
      return runOperation({ operation: 'unfork' }, request, async (call, run) => {
        const parent = await memory.unfork(call, presentedChild(request), run);
        log.info('fork undone: its child workflow did not start', { agentId: request.agentId, childId: request.childId });
        return parent;
      });
    },

    pin(request: ContextRequest): Promise<ContextSnapshot> {
      return runOperation({ operation: 'pin' }, request, (call, run) => memory.pin(call, run));
    },

    unpin(request: ContextRequest): Promise<ContextSnapshot> {
      return runOperation({ operation: 'unpin' }, request, (call, run) => memory.unpin(call, run));
    },

    release(request: ContextRequest): Promise<ReleaseResult> {
      return runOperation({ operation: 'release' }, request, async (call, run) => {
        const result = await memory.release(call, run);
        log.info('context released', { agentId: request.agentId });
        return result;
      });
    },

    renew(request: RenewRequest): Promise<RenewResult> {
      return runOperation({ operation: 'renew' }, request, async (call, run) => {
        const renewed = await memory.renew(call, { token: request.next, custodian: request.nextCustodian }, run);
        log.info('capability renewed', { agentId: request.agentId });
        return renewed;
      });
    },
  };

  const local: LocalActivities = {
    async resumeIfHolder(request: LocalResumeRequest): Promise<ResumeResult | null> {
      // Not this worker's context (the workflow task ran elsewhere), or evicted to disk since the workflow
      // looked: the holder's queue takes it, with heartbeats, which a local activity cannot send.
      if (request.holder !== holder || !memory.holds(request.agentId) || memory.snapshot(request.agentId).tier === 'disk') return null;
      return resume('resumeIfHolder', request);
    },

    async turnIfHolder(request: LocalTurnRequest): Promise<TurnResult | null> {
      // Only a resident context: one to bring back first, or one evicted since the workflow looked, takes the
      // holder's queue, whose heartbeats cover the transfer. Nothing is checked or recorded before this
      // answer, so null leaves the operation id unused for the holder's queue.
      if (request.holder !== holder || !memory.holds(request.agentId) || memory.snapshot(request.agentId).tier !== 'device') return null;
      return turn('turnIfHolder', request);
    },

    async wakeIfHolder(request: LocalResumeRequest): Promise<ResumeResult | null> {
      if (request.holder !== holder || !memory.holds(request.agentId)) return null;
      return wake('wakeIfHolder', request);
    },
  };

  function turn(activity: string, request: TurnRequest): Promise<TurnResult> {
    const progress = { phase: 'turn', turn: request.turn, ...(request.tokens === undefined ? {} : { tokens: request.tokens }) };
    return runOperation({ operation: 'turn', activity, progress }, request, (call, run) => memory.turn(call, request, run));
  }

  function wake(activity: string, request: ResumeRequest): Promise<ResumeResult> {
    const progress = { phase: 'wake', tokens: request.expected.tokens };
    return runOperation({ operation: 'wake', activity, progress }, request, (call, run) =>
      memory.resume(call, { ...request, roomOnly: true }, run),
    );
  }

  function resume(activity: string, request: ResumeRequest): Promise<ResumeResult> {
    const progress = { phase: 'resume', tokens: request.expected.tokens };
    return runOperation({ operation: 'resume', activity, progress }, request, (call, run) => memory.resume(call, request, run));
  }

  return { placement, holder: holderActivities, local };
}

/** What admits the call, as the journal binds its outcome: the calling run comes from Temporal, not the request. */
function admissionOf(request: ContextRequest): Admission {
  const execution = Context.current().info.workflowExecution;
  return {
    workflowId: execution?.workflowId ?? '',
    runId: execution?.runId ?? '',
    tenant: request.tenant,
    tokenDigest: createHash('sha256').update(String(request.capability)).digest('base64url'),
  };
}

/** The call as the capability check sees it: the calling workflow comes from Temporal, not from the request. */
function presented(request: ContextRequest, action: Operation): Presented {
  return {
    contextId: request.agentId,
    agentId: request.agentId,
    tenant: request.tenant,
    // Absent only outside a workflow's activity: an empty id matches no token.
    workflowId: Context.current().info.workflowExecution?.workflowId ?? '',
    action,
    token: request.capability,
    revokedBelow: request.revokedBelow,
  };
}

/** The child's token as a fork presents it: bound to the child's own workflow, which starts after the fork. */
function presentedChild(request: ForkRequest): Presented {
  return {
    contextId: request.childId,
    agentId: request.childId,
    tenant: request.tenant,
    workflowId: agentWorkflowId(request.childId),
    action: 'fork',
    token: request.childCapability,
  };
}

/** The operation's success ends the context: the journal then keeps only its record (for its retries). */
function endsContext(operation: Operation): boolean {
  const row: OperationRow = OPERATIONS[operation];
  return row.ends === true;
}
