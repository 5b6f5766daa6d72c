// The activities a GPU worker runs for agent workflows. Placement activities run on the shared task
// queue: whichever worker takes one holds the context afterwards and answers with its own
// worker-specific queue. Context activities run on that queue. Every call is checked against the
// context's grant, applied at most once per operation id, and reports FabricErrors by code.
import { createHash } from 'node:crypto';

import { Context, log } from '@temporalio/activity';

import type { AgentMemory } from '../agent-memory/agent-memory';
import type { Action, Presented } from '../agent-memory/capability-check';
import type { TurnInput } from '../agent-memory/turn';
import { FabricError } from '../fabric/errors';
import { emptyDigest } from '../agent-memory/context-digest';
import { agentWorkflowId } from '../identity/agent-identity';
import type { CapabilityClaims } from '../security/claims';
import { withFailureCodes } from './failures';
import { withHeartbeat, type Progress } from './heartbeat';
import { OperationJournal, type Admission } from './operation-journal';
import type {
  AllocateRequest,
  Allocation,
  ContextActivities,
  ContextRequest,
  ContextSnapshot,
  LocalActivities,
  LocalRestoreRequest,
  OffloadRequest,
  Placement,
  PlacementActivities,
  RecoverRequest,
  ReleaseResult,
  RenewRequest,
  RestoreRequest,
  RestoreResult,
  ShareRequest,
  ShareResult,
  TransferResult,
  TurnRequest,
  TurnResult,
} from './types';

export type * from './types';
export { OperationJournal } from './operation-journal';

export interface ActivityHooks {
  /**
   * Runs after an operation is applied and recorded, before its result goes back. Tests throw here once
   * to make Temporal retry an activity whose side effect already happened.
   */
  afterApplied?(activity: string, request: ContextRequest): void;
}

interface Operation {
  activity: string;
  /** The action checked against the token's rights and named in a denial. */
  action: Action;
  /** Whether the context must already be held by this worker. */
  held: boolean;
  /**
   * Its success revokes the token that asked for it (release, retire, renew): a retry of it is admitted
   * on the token alone (authentic, current, the caller's, with the right), since the context's epoch
   * and grant no longer accept it.
   */
  revokesPresenter?: boolean;
}

export function createActivities(options: {
  memory: AgentMemory;
  /** This worker's own task queue, returned by placement activities. */
  holder: string;
  /** Whether this worker also runs agent workflows (and with them the local activities). */
  runsWorkflows?: boolean;
  journal?: OperationJournal;
  hooks?: ActivityHooks;
}): { placement: PlacementActivities; context: ContextActivities; local: LocalActivities } {
  const { memory, holder, hooks } = options;
  const holderRunsWorkflows = options.runsWorkflows === true;
  const journal = options.journal ?? new OperationJournal();

  /**
   * Admission, at-most-once application with heartbeats, then the after-applied hook. `progress` names
   * the phase a long call is in; the heartbeat reports it. A retry is admitted like the first call
   * before it gets the recorded outcome, and only a retry from the same workflow run with the same token
   * finds that outcome at all.
   */
  function operate<T>(
    op: Operation,
    request: ContextRequest,
    apply: (claims: CapabilityClaims | undefined) => Promise<T>,
    progress: () => Progress = () => ({ phase: op.activity }),
  ): Promise<T> {
    return withFailureCodes(async () => {
      const call = presented(request, op.action);
      const admission = admissionOf(request);
      const recorded = journal.recorded<T>(request.agentId, request.operationId, admission);
      if (recorded) return answerRetry(op, request, call, recorded);
      const claims = await memory.admit(call);
      if (op.held) memory.requireHeld(request.agentId);
      const result = await journal.run(request.agentId, request.operationId, admission, () => withHeartbeat(progress, () => apply(claims)));
      hooks?.afterApplied?.(op.activity, request);
      return result;
    });
  }

  /** A retry's recorded outcome, once the retry is admitted like the first call (see Operation.revokesPresenter). */
  async function answerRetry<T>(op: Pick<Operation, 'activity' | 'revokesPresenter'>, request: ContextRequest, call: Presented, recorded: Promise<T>): Promise<T> {
    const outcome = await recorded;
    await (op.revokesPresenter ? memory.admitRetry(call) : memory.admit(call));
    hooks?.afterApplied?.(op.activity, request);
    return outcome;
  }

  /** The context is gone: the journal keeps only the ending operation's record (for its retries). */
  function ended(request: ContextRequest): void {
    journal.end(request.agentId, request.operationId);
  }

  const placement: PlacementActivities = {
    allocate(request: AllocateRequest): Promise<Allocation> {
      return withFailureCodes(async () => {
        memory.checkShape(request.shape, request.tokensPerBlock);
        const call = presented(request, 'allocate');
        const admission = admissionOf(request);
        const recorded = journal.recorded<Allocation>(request.agentId, request.operationId, admission);
        if (recorded) return answerRetry({ activity: 'allocate' }, request, call, recorded);
        // Admitted inside: the grant is made there (memory.create refuses an id granted to someone else).
        const result = await journal.run(request.agentId, request.operationId, admission, async () => {
          // Only once admitted: an id used before starts with no record of it, and no caller can wipe another's.
          if (await memory.create(call, request.checkpoint)) journal.end(request.agentId, request.operationId);
          log.info('context allocated', { agentId: request.agentId, tenant: request.tenant, holder });
          return { holder, holderRunsWorkflows, ...memory.snapshot(request.agentId), digest: emptyDigest() };
        });
        hooks?.afterApplied?.('allocate', request);
        return result;
      });
    },

    recover(request: RecoverRequest): Promise<Placement> {
      return operate({ activity: 'recover', action: 'recover', held: false }, request, async () => {
        const claim = request.epoch === undefined ? undefined : { epoch: request.epoch, attempt: Context.current().info.attempt };
        await memory.recover(request.agentId, request.tenant, request.minVersion, claim);
        log.info('context recovered from the cold tier', { agentId: request.agentId, holder });
        return { holder, holderRunsWorkflows, ...memory.snapshot(request.agentId) };
      });
    },

    retire(request: ContextRequest): Promise<ReleaseResult> {
      return operate({ activity: 'retire', action: 'release', held: false, revokesPresenter: true }, request, async (claims) => {
        const releasedTokens = await memory.retire(request.agentId, claims!);
        ended(request);
        log.info('context retired without its holder', { agentId: request.agentId, holder });
        return { releasedTokens };
      });
    },
  };

  const context: ContextActivities = {
    appendTurn(request: TurnRequest): Promise<TurnResult> {
      let phase = 'append';
      const progress = () => ({ phase, turn: request.turn, ...(request.tokens === undefined ? {} : { tokens: request.tokens }) });
      return operate({ activity: 'appendTurn', action: 'append', held: true }, request, async () => {
        const [{ digest, alreadyApplied, reply, durable }, appendMs] = await timed(async () => {
          const applied = await memory.appendTurn(request.agentId, request.turn, turnInputOf(request), request.before);
          phase = 'checkpoint';
          const copied = request.checkpoint ? await memory.checkpointUnlessDiskFull(request.agentId) : undefined;
          return { ...applied, durable: copied };
        });
        return { ...memory.snapshot(request.agentId), digest, appendMs, alreadyApplied, ...(reply ? { reply } : {}), ...(durable === undefined ? {} : { durable }) };
      }, progress);
    },

    pin(request: ContextRequest): Promise<ContextSnapshot> {
      return operate({ activity: 'pin', action: 'pin', held: true }, request, async () => {
        memory.pin(request.agentId);
        return memory.snapshot(request.agentId);
      });
    },

    unpin(request: ContextRequest): Promise<ContextSnapshot> {
      return operate({ activity: 'unpin', action: 'unpin', held: true }, request, async () => {
        memory.unpin(request.agentId);
        return memory.snapshot(request.agentId);
      });
    },

    share(request: ShareRequest): Promise<ShareResult> {
      return operate({ activity: 'share', action: 'fork', held: true }, request, async (parent) => {
        await memory.share(request.agentId, parent!, presentedChild(request), request.checkpoint, request.childCustodian);
        return { parent: memory.snapshot(request.agentId), child: memory.snapshot(request.childId) };
      });
    },

    unshare(request: ShareRequest): Promise<ContextSnapshot> {
      return operate({ activity: 'unshare', action: 'fork', held: true }, request, async (parent) => {
        await memory.unshare(parent!, presentedChild(request));
        log.info('fork undone: its child workflow did not start', { agentId: request.agentId, childId: request.childId });
        return memory.snapshot(request.agentId);
      });
    },

    offload(request: OffloadRequest): Promise<TransferResult> {
      const progress = () => ({ phase: `offload to ${request.tier}` });
      return operate({ activity: 'offload', action: 'offload', held: true }, request, async () => {
        const [bytes, transferMs] = await timed(() => memory.offload(request.agentId, request.tier));
        return { ...memory.snapshot(request.agentId), bytes, transferMs };
      }, progress);
    },

    restore(request: RestoreRequest): Promise<RestoreResult> {
      return restore('restore', request);
    },

    release(request: ContextRequest): Promise<ReleaseResult> {
      return operate({ activity: 'release', action: 'release', held: true, revokesPresenter: true }, request, async (claims) => {
        const releasedTokens = await memory.release(request.agentId, claims!);
        ended(request);
        log.info('context released', { agentId: request.agentId });
        return { releasedTokens };
      });
    },

    renew(request: RenewRequest): Promise<void> {
      return operate({ activity: 'renew', action: 'renew', held: false, revokesPresenter: true }, request, async (current) => {
        await memory.renew(current!, { ...presented(request, 'renew'), token: request.next }, request.nextCustodian);
        log.info('capability renewed', { agentId: request.agentId });
      });
    },
  };

  const local: LocalActivities = {
    async restoreIfHolder(request: LocalRestoreRequest): Promise<RestoreResult | null> {
      // Not this worker's context (the workflow task ran elsewhere), or evicted to disk since the workflow
      // looked: the holder's queue takes it, with heartbeats, which a local activity cannot send.
      if (request.holder !== holder || !memory.holds(request.agentId) || memory.snapshot(request.agentId).tier === 'disk') return null;
      return restore('restoreIfHolder', request);
    },
  };

  function restore(activity: string, request: RestoreRequest): Promise<RestoreResult> {
    let phase = 'restore';
    const progress = () => ({ phase, tokens: request.expected.tokens, verifiedTokens: memory.verifiedTokens(request.agentId) });
    return operate({ activity, action: 'restore', held: true }, request, async () => {
      const [{ bytes, from }, transferMs] = await timed(() => memory.restore(request.agentId));
      const snapshot = memory.snapshot(request.agentId);
      // Bytes that came from disk are always verified, also when the workflow thought them in host memory.
      if (!request.verify && from !== 'disk' && snapshot.tokens === request.expected.tokens) {
        return { ...snapshot, bytes, transferMs, from, digest: request.expected, verified: false, verifyMs: 0 };
      }
      phase = 'verify';
      const [digest, verifyMs] = await timed(() => memory.verify(request.agentId, request.expected));
      return { ...snapshot, bytes, transferMs, from, digest, verified: true, verifyMs };
    }, progress);
  }

  return { placement, context, local };
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
function presented(request: ContextRequest, action: Action): Presented {
  return {
    contextId: request.agentId,
    agentId: request.agentId,
    tenant: request.tenant,
    // Absent only outside a workflow's activity: an empty id matches no token.
    workflowId: Context.current().info.workflowExecution?.workflowId ?? '',
    action,
    token: request.capability,
  };
}

/** The child's token as a share presents it: bound to the child's own workflow, which starts after the share. */
function presentedChild(request: ShareRequest): Presented {
  return {
    contextId: request.childId,
    agentId: request.childId,
    tenant: request.tenant,
    workflowId: agentWorkflowId(request.childId),
    action: 'fork',
    token: request.childCapability,
  };
}

/** A message or a token count, exactly one: the workflow checks it, a raw caller may not have. */
function turnInputOf(request: TurnRequest): TurnInput {
  const { tokens, message, generation } = request;
  if (typeof message === 'string' && tokens === undefined) return { message, ...(generation ? { generation } : {}) };
  if (Number.isSafeInteger(tokens) && (tokens as number) >= 1 && message === undefined) return { tokens: tokens as number };
  throw new FabricError('INVALID_ARGUMENT', 'a turn takes either a message or a positive token count');
}

/** Runs `work` and measures it, in milliseconds to two decimals. */
async function timed<T>(work: () => Promise<T>): Promise<[T, number]> {
  const started = performance.now();
  const value = await work();
  return [value, Math.round((performance.now() - started) * 100) / 100];
}
