// The agent workflow: one per agent, for the agent's whole life. It walks the lifecycle of lifecycle.ts,
// decides which tier the context lives in and which worker holds it, and keeps only counts and digests:
// no KV byte ever enters its history. Updates move the agent (turn, suspend, resume, fork, pin, unpin,
// release); two timers demote an unused one (idle -> warm -> cold); continue-as-new carries the state
// across when Temporal suggests it. Every update acts with the caller's own capability; what the workflow
// does on its own (allocation, timers, failover) it does with the agent's custodian token, the only one
// it carries (see ownCapability).
import {
  ActivityFailure,
  ApplicationFailure,
  ParentClosePolicy,
  TemporalFailure,
  TimeoutFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  sleep,
  startChild,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { SearchAttributeUpdatePair } from '@temporalio/common';

import type {
  ContextActivities,
  ContextRequest,
  ContextSnapshot,
  LocalActivities,
  Placement,
  PlacementActivities,
  RestoreRequest,
  RestoreResult,
} from '../activities/types';
import { TIER_DEPTH, type Tier } from '../fabric/tier';
import { agentWorkflowId, isAgentId } from '../identity/agent-identity';
import {
  forkUpdate,
  pinUpdate,
  releaseUpdate,
  renewUpdate,
  resumeUpdate,
  statusQuery,
  suspendUpdate,
  turnUpdate,
  unpinUpdate,
  type AgentInput,
  type AgentState,
  type AgentStatus,
  type Credentials,
  type ForkArgs,
  type ForkOutcome,
  type RenewArgs,
  type SuspendArgs,
  type TurnArgs,
  type TurnGeneration,
  type TurnOutcome,
  type TurnReply,
  MAX_MESSAGE_CHARS,
  MAX_REPLY_TOKENS,
} from './definitions';
import { initialState, memoOf, searchAttributesOf, statusOf } from './agent-state';
import { LifecycleError, canTake, next, timerOf, type LifecycleEvent } from './lifecycle';
import { OperationQueue } from './operation-queue';
import { KvBlocks, KvPhase, KvTier, KvTokens } from './search-attributes';

export async function agentWorkflow(input: AgentInput): Promise<AgentStatus> {
  const { agentId, tenant, config } = input;
  const { timers, timeouts } = config;
  const durable = config.durability === 'every-turn';
  const state: AgentState = input.carried ?? initialState(input);
  const queue = new OperationQueue();
  /** Bumped when the timer that applies changes (phase class, pin): the running wait starts over. */
  let timerEpoch = 0;
  let published = publishedAttributes();

  // Placement calls go to the shared queue: any GPU worker may take them and then holds the context.
  const placement = proxyActivities<PlacementActivities>({
    startToCloseTimeout: timeouts.attemptMs,
    heartbeatTimeout: timeouts.heartbeatMs,
    // Retryable errors (pool exhausted, disk full) are retried until this; then the operation fails.
    scheduleToCloseTimeout: timeouts.operationMs,
    retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '10s' },
  });

  // Run in the workflow task by the worker that runs it: one attempt, and any failure but a decisive one
  // sends the call to the holder's queue instead (restoreLocally).
  const local = proxyLocalActivities<LocalActivities>({
    startToCloseTimeout: timeouts.attemptMs,
    retry: { maximumAttempts: 1 },
  });

  /**
   * Calls on the holder's queue. Each activity gets one attempt, and the workflow retries retryable
   * failures (pool exhausted, busy, disk full, an attempt past attemptMs) with the same arguments (so the
   * worker's journal answers a repeated operation) and backoff, until operationMs. Temporal's own retry
   * would send a retry after a heartbeat timeout to the same queue, where a frozen (not dead) worker's
   * pending polls swallow it: the workflow must see that timeout to fail over (onHolder).
   */
  function on(holder: string): ContextActivities {
    // Runs recorded before this change retried on the server: they replay with that policy.
    if (!patched(WORKFLOW_SIDE_RETRIES)) return serverRetried(holder);
    const once = proxyActivities<ContextActivities>({
      taskQueue: holder,
      // The holder's queue dies with its worker: a call nobody takes in this long means the worker is gone.
      scheduleToStartTimeout: timeouts.holderLossMs,
      startToCloseTimeout: timeouts.attemptMs,
      heartbeatTimeout: timeouts.heartbeatMs,
      retry: { maximumAttempts: 1 },
    });
    return new Proxy(once, {
      get: (target, name: keyof ContextActivities) => (arg: never) => retried(() => (target[name] as (a: never) => Promise<unknown>)(arg)),
    });
  }

  function serverRetried(holder: string): ContextActivities {
    return proxyActivities<ContextActivities>({
      taskQueue: holder,
      scheduleToStartTimeout: timeouts.holderLossMs,
      startToCloseTimeout: timeouts.attemptMs,
      heartbeatTimeout: timeouts.heartbeatMs,
      scheduleToCloseTimeout: timeouts.operationMs,
      retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '10s' },
    });
  }

  async function retried<T>(attempt: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + timeouts.operationMs;
    for (let backoffMs = 200; ; backoffMs = Math.min(backoffMs * 2, 10_000)) {
      try {
        return await attempt();
      } catch (err) {
        if (!retryable(err) || Date.now() + backoffMs > deadline) throw err;
        await sleep(backoffMs);
      }
    }
  }

  // Queued before the handlers exist: updates that arrived with the first workflow task are delivered as
  // soon as their handler is set, and must find the allocation ahead of them in the queue.
  const allocated = input.carried || input.parent ? undefined : operation(allocate);

  // ---- handlers before the first await, so updates that arrive with the first workflow task find them ----

  setHandler(statusQuery, () => statusOf(input, state));
  setHandler(turnUpdate, handler(turn), { validator: validator<TurnArgs>(checkTurn) });
  setHandler(suspendUpdate, handler(suspend), { validator: validator<SuspendArgs>(checkSuspend) });
  setHandler(resumeUpdate, handler(resume), { validator: validator<Credentials>() });
  setHandler(forkUpdate, handler(fork), { validator: validator<ForkArgs>(checkFork) });
  setHandler(pinUpdate, handler(pin), { validator: validator<Credentials>() });
  setHandler(unpinUpdate, handler(unpin), { validator: validator<Credentials>() });
  setHandler(releaseUpdate, handler(release), { validator: validator<Credentials>() });
  setHandler(renewUpdate, handler(renew), { validator: validator<RenewArgs>(checkRenew) });

  await allocated;

  // ---- the timers: idle -> warm -> cold ----
  // One timer at a time, restarted only when it fires or when the phase class changes, never per turn:
  // a turn just moves lastUseAt, and a timer that fires early sleeps the rest. Turns cost no timer events.
  while (state.phase !== 'released' && !workflowInfo().continueAsNewSuggested) {
    const timer = state.pinned ? undefined : timerOf(state.phase);
    const epoch = timerEpoch;
    const interrupted = () => state.phase === 'released' || timerEpoch !== epoch || workflowInfo().continueAsNewSuggested;
    if (timer === undefined) {
      await condition(interrupted);
      continue;
    }
    const wait = dueAt(timer) - Date.now();
    if (wait > 0) {
      await condition(interrupted, wait);
      continue;
    }
    await operation(() => demoteOnTimer(timer)).catch((err: unknown) => {
      // Try again one period later rather than spin; the failure is in the history and the log.
      state.lastUseAt = state.phaseSince = Date.now();
      log.warn('timed demotion failed', { agentId, timer, error: String(err) });
    });
  }

  await condition(() => allHandlersFinished() && queue.idle);
  if (state.phase === 'released') return statusOf(input, state);
  state.run++;
  return continueAsNew<typeof agentWorkflow>({ ...input, carried: state });

  // ---- operations (each runs alone, in arrival order) ----

  async function allocate(): Promise<void> {
    const { shape, tokensPerBlock } = input.model;
    const placed = await placement.allocate({ ...request(input.capability), shape, tokensPerBlock, checkpoint: durable });
    place(placed);
    absorb(placed);
    state.digest = placed.digest;
  }

  async function turn({ capability, tokens, message, generation }: TurnArgs): Promise<TurnOutcome> {
    if (state.tier !== 'device') await bringBack(capability);
    move('turn-started');
    let reply: TurnReply | undefined;
    try {
      // A message's token count is the model's to decide: any number may already be in flight.
      const input = tokens !== undefined ? { tokens } : { message: message!, ...(generation ? { generation } : {}) };
      const result = await onHolder(async (activities) => {
        // After a failover the context is on disk at its new holder; the turn may already be in it.
        if (state.tier !== 'device') await restoreOn(activities, capability, tokens ?? 'any');
        return activities.appendTurn({ ...request(capability), turn: state.turns, ...input, before: state.digest, checkpoint: durable });
      });
      reply = result.reply;
      absorb(result);
      state.digest = result.digest;
      state.turns++;
      if (result.durable === false) {
        state.durableCopyStale = true;
        log.warn('disk full: the turn is in memory only until a later checkpoint succeeds', { agentId, turn: state.turns });
      } else if (result.durable) {
        delete state.durableCopyStale;
      }
    } finally {
      move('turn-finished');
      touch();
    }
    return reply ? { ...statusOf(input, state), reply } : statusOf(input, state);
  }

  async function suspend({ capability, tier }: SuspendArgs): Promise<AgentStatus> {
    const event = tier === 'host' ? 'suspended-host' : 'suspended-disk';
    if (!canTake(state.phase, event)) return statusOf(input, state); // already there, or deeper
    await demote(capability, tier);
    move(event);
    return statusOf(input, state);
  }

  async function resume({ capability }: Credentials): Promise<AgentStatus> {
    // Even a resident context goes through the worker: the caller's capability is checked there, and a
    // resume always answers with bytes verified against the recorded digest.
    await bringBack(capability);
    touch();
    return statusOf(input, state);
  }

  async function fork({ capability, childId, childCapability, childCustodian }: ForkArgs): Promise<ForkOutcome> {
    const custodian = childCustodian === undefined ? {} : { childCustodian };
    const shared = await onHolder((activities) =>
      activities.share({ ...request(capability), childId, childCapability, ...custodian, checkpoint: durable }),
    );
    absorb(shared.parent);
    const childInput: AgentInput = {
      agentId: childId,
      tenant,
      // The child carries its custodian, not its own token (forks recorded before custodians: the token).
      capability: childCustodian ?? childCapability,
      model: input.model,
      config,
      parent: {
        agentId,
        holder: state.holder!,
        ...(state.holderRunsWorkflows ? { holderRunsWorkflows: true } : {}),
        digest: state.digest,
        tier: shared.child.tier,
        blocks: shared.child.blocks,
        sharedBlocks: shared.child.sharedBlocks,
      },
    };
    const childState = initialState(childInput);
    const workflowId = agentWorkflowId(childId);
    try {
      await startChild(agentWorkflow, {
        workflowId,
        args: [childInput],
        // The child is an agent in its own right: it outlives this workflow's runs and its release.
        parentClosePolicy: ParentClosePolicy.ABANDON,
        memo: memoOf(childInput),
        typedSearchAttributes: searchAttributesOf(childInput, childState),
      });
    } catch (err) {
      // No workflow will ever own the child context: give its blocks back (with the parent's capability:
      // the child's is bound to the workflow that did not start), then report.
      if (patched(UNSHARE_FAILED_FORK)) {
        try {
          absorb(await onHolder((activities) => activities.unshare({ ...request(capability), childId, childCapability, checkpoint: false })));
        } catch (undo) {
          log.warn('the child context of a failed fork was not freed', { agentId, childId, error: String(undo) });
        }
      } else {
        const giveBack = { agentId: childId, tenant, capability: childCapability, operationId: nextOperationId() };
        await onHolder((activities) => activities.release(giveBack)).catch(() => undefined);
      }
      throw ApplicationFailure.create({ type: 'INVALID_ARGUMENT', message: `cannot start agent ${childId}: ${String(err)}`, nonRetryable: true });
    }
    state.forks++;
    touch();
    return { childId, workflowId, child: statusOf(childInput, childState) };
  }

  async function pin({ capability }: Credentials): Promise<AgentStatus> {
    if (state.tier !== 'device') await bringBack(capability);
    absorb(await onHolder((activities) => activities.pin(request(capability))));
    timerEpoch++;
    touch();
    return statusOf(input, state);
  }

  async function unpin({ capability }: Credentials): Promise<AgentStatus> {
    if (!state.pinned) return statusOf(input, state);
    absorb(await onHolder((activities) => activities.unpin(request(capability))));
    timerEpoch++;
    touch();
    return statusOf(input, state);
  }

  async function release({ capability }: Credentials): Promise<AgentStatus> {
    try {
      await onHolder((activities) => activities.release(request(capability)));
    } catch (err) {
      if (!adoptionImpossible(err)) throw err;
      // The holder is gone and no durable copy can be adopted: there are no bytes left to free, only the
      // grant, the tokens and whatever files remain. Any worker ends those.
      log.warn('context lost with its holder; releasing what is left', { agentId, error: String(err) });
      await placement.retire(request(capability)).catch((retireErr: unknown) => {
        // A retried retire whose first attempt finished elsewhere finds no grant: already done.
        if (!failedWith(retireErr, 'STALE_HANDLE')) throw retireErr;
      });
    }
    move('released');
    Object.assign(state, { tier: 'none', holder: null, blocks: 0, sharedBlocks: 0, pinned: false });
    return statusOf(input, state);
  }

  /**
   * Replaces the token the workflow acts with on its own (timers, failover) by the replacement's
   * custodian: the worker checks both and revokes every older token of the context, the presented one
   * and the custodian carried so far included.
   */
  async function renew({ capability, next, nextCustodian }: RenewArgs): Promise<AgentStatus> {
    await onHolder((activities) => activities.renew({ ...request(capability), next, ...(nextCustodian === undefined ? {} : { nextCustodian }) }));
    // Renewals recorded before custodian tokens carried the replacement itself.
    state.capability = nextCustodian ?? next;
    return statusOf(input, state);
  }

  async function demoteOnTimer(timer: 'idle-timeout' | 'warm-timeout'): Promise<void> {
    // Re-check under the queue: a turn or a suspend may have run since the timer fired.
    if (state.pinned || timerOf(state.phase) !== timer || !canTake(state.phase, timer) || Date.now() < dueAt(timer)) return;
    await demote(ownCapability(), timer === 'idle-timeout' ? 'host' : 'disk');
    move(timer);
  }

  // ---- moving the context ----

  async function demote(capability: string, tier: 'host' | 'disk'): Promise<void> {
    const moved = await onHolder(async (activities) =>
      // After a failover the context is already on disk: nothing to move.
      state.tier !== 'none' && TIER_DEPTH[state.tier] >= TIER_DEPTH[tier] ? undefined : activities.offload({ ...request(capability), tier }),
    );
    if (moved) absorb(moved);
    if (tier === 'disk') delete state.durableCopyStale;
  }

  /** Whatever the tier -> resident, bytes verified against the recorded digest. */
  async function bringBack(capability: string): Promise<void> {
    if (!(await restoreLocally(capability))) await onHolder((activities) => restoreOn(activities, capability, 0));
    if (canTake(state.phase, 'resumed')) move('resumed');
  }

  /**
   * A context in memory comes back in the workflow task itself when the worker running that task holds
   * it: a local activity, so the resume costs one workflow task and no activity dispatch through the
   * server. False when that worker is not the holder (or is not a kvfabric worker): the caller then goes
   * through the holder's queue, where heartbeats, failover and retries apply. From disk it always does.
   */
  async function restoreLocally(capability: string): Promise<boolean> {
    // Only a holder that runs agent workflows can be the worker running this task; every worker that does
    // is a kvfabric worker with the local activity (see the catch below).
    if (state.holder === null || !state.holderRunsWorkflows || (state.tier !== 'device' && state.tier !== 'host')) return false;
    // Runs recorded before this change restored through the holder's queue only.
    if (!patched(LOCAL_RESTORE)) return false;
    const holder = state.holder;
    try {
      const restored = await local.restoreIfHolder({ ...restoreRequest(capability), holder });
      if (restored === null) return false;
      accept(restored, 0);
      return true;
    } catch (err) {
      // Not an activity's failure: this worker lacks the local activity (it runs the agent workflow without
      // the kvfabric plugin). Falling back here would record a history that replays differently on a
      // kvfabric worker, so the workflow task fails instead, and Temporal retries it, on any worker.
      if (!(err instanceof TemporalFailure)) {
        throw new Error(`this worker runs agent workflows without kvfabric's activities while GPU workers run them too; run agent workflows on kvfabric workers only (${String(err)})`);
      }
      // A denial or damaged bytes are the answer, as from the holder's queue; anything else (a busy pool, an
      // attempt past its time) is the holder's queue's to retry. (The SDK hands a local activity's
      // failure over as its cause itself, not wrapped in an ActivityFailure.)
      const cause = err instanceof ActivityFailure ? err.cause : err;
      if (cause instanceof ApplicationFailure && (cause.type === 'PERMISSION_DENIED' || cause.type === 'INTEGRITY')) {
        if (cause.type === 'PERMISSION_DENIED') state.denials++;
        throw ApplicationFailure.create({ type: cause.type, message: cause.message, nonRetryable: true });
      }
      log.info('local restore not done; asking the holder', { agentId, error: String(err) });
      return false;
    }
  }

  /**
   * Restores and verifies. The context may hold `inFlightTokens` more than recorded: a turn whose
   * worker was lost after the turn reached the durable copy; the turn's own activity then checks them.
   */
  async function restoreOn(activities: ContextActivities, capability: string, inFlightTokens: number | 'any'): Promise<void> {
    accept(await activities.restore(restoreRequest(capability)), inFlightTokens);
  }

  function restoreRequest(capability: string): RestoreRequest {
    const verify = config.verifyRestores !== 'from-disk' || state.tier === 'disk';
    return { ...request(capability), expected: state.digest, verify };
  }

  /** Takes a restore's result: its token count against the recorded one, then its snapshot and figures. */
  function accept(restored: RestoreResult, inFlightTokens: number | 'any'): void {
    const from = state.tier as Tier;
    const extra = restored.tokens - state.digest.tokens;
    if (extra !== 0 && extra !== inFlightTokens && !(inFlightTokens === 'any' && extra > 0)) {
      throw ApplicationFailure.create({
        type: 'INTEGRITY',
        message: `context came back with ${restored.tokens} tokens; the workflow recorded ${state.digest.tokens}`,
        nonRetryable: true,
      });
    }
    absorb(restored);
    state.lastRestore = { bytes: restored.bytes, transferMs: restored.transferMs, verified: restored.verified, verifyMs: restored.verifyMs, from: restored.from ?? from };
  }

  /**
   * Runs a call on the holder. When the holder is gone (its queue unserved past holderLossMs, its
   * heartbeats stopped, or it no longer has the context), another worker adopts the context from the cold
   * tier and the call runs there.
   */
  async function onHolder<T>(call: (activities: ContextActivities) => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      if (state.holder === null) await failover();
      try {
        return await call(on(state.holder!));
      } catch (err) {
        if (attempt > 0 || !holderLost(err)) throw err;
        log.warn('holder lost', { agentId, holder: state.holder, error: String(err) });
        state.holder = null;
      }
    }
  }

  async function failover(): Promise<void> {
    const wasPinned = state.pinned;
    const placed = await placement.recover({ ...request(ownCapability()), epoch: state.failovers + 1, minVersion: state.durableVersion });
    place(placed);
    absorb(placed);
    state.failovers++;
    // The pin died with the old holder: take it again on the new one (pins hold at any tier).
    if (wasPinned && patched(REPIN_AFTER_FAILOVER)) absorb(await on(placed.holder).pin(request(ownCapability())));
    if (canTake(state.phase, 'holder-lost')) move('holder-lost');
    log.info('context adopted from the cold tier', { agentId, holder: placed.holder });
  }

  // ---- bookkeeping ----

  function operation<T>(body: () => Promise<T>): Promise<T> {
    return queue.run(async () => {
      if (state.phase === 'released') throw ApplicationFailure.create({ type: 'INVALID_STATE', message: `agent ${agentId} is released`, nonRetryable: true });
      try {
        return await body();
      } finally {
        publish();
      }
    });
  }

  function handler<A extends Credentials, R>(body: (args: A) => Promise<R>): (args: A) => Promise<R> {
    return (args) =>
      operation(() => body(args)).catch((err: unknown) => {
        throw asUpdateFailure(err);
      });
  }

  function asUpdateFailure(err: unknown): unknown {
    if (err instanceof LifecycleError) return ApplicationFailure.create({ type: 'INVALID_STATE', message: err.message, nonRetryable: true });
    if (!(err instanceof ActivityFailure)) return err;
    const cause = err.cause;
    if (cause instanceof ApplicationFailure) {
      if (cause.type === 'PERMISSION_DENIED') state.denials++;
      return ApplicationFailure.create({ type: cause.type ?? 'UNAVAILABLE', message: cause.message, nonRetryable: true });
    }
    if (cause instanceof TimeoutFailure) {
      return ApplicationFailure.create({ type: 'UNAVAILABLE', message: `no worker completed ${err.activityType} in time (${cause.timeoutType})`, nonRetryable: true });
    }
    return err;
  }

  function request(capability: string): ContextRequest {
    return { agentId, tenant, capability, operationId: nextOperationId() };
  }

  /**
   * The token the workflow acts with when no caller gave one (timers, failover): the custodian of the latest
   * renewal, else the one it started with. Runs started before custodian tokens carry the agent's full
   * token until a renewal brings a custodian, and keep acting with it. No patch marks this change: it
   * alters the data commands carry, never which commands run, and a run's own data says which token it
   * has (recorded histories of both kinds replay: test/temporal/replay.test.ts).
   */
  function ownCapability(): string {
    return state.capability ?? input.capability;
  }

  function nextOperationId(): string {
    return `${agentId}:${state.nextOperation++}`;
  }

  function move(event: LifecycleEvent): void {
    const to = next(state.phase, event);
    if (timerOf(to) !== timerOf(state.phase)) timerEpoch++;
    if (to !== state.phase) state.phaseSince = Date.now();
    state.phase = to;
  }

  function place(placed: Placement): void {
    state.holder = placed.holder;
    if (placed.holderRunsWorkflows) state.holderRunsWorkflows = true;
    else delete state.holderRunsWorkflows;
  }

  function absorb(snapshot: ContextSnapshot): void {
    state.tier = snapshot.tier;
    state.tokens = snapshot.tokens;
    state.blocks = snapshot.blocks;
    state.sharedBlocks = snapshot.sharedBlocks;
    state.pinned = snapshot.pinned;
    // The highest seen: a snapshot taken before a later durable copy never lowers the record.
    state.durableVersion = Math.max(state.durableVersion, snapshot.durableVersion);
  }

  function touch(): void {
    state.lastUseAt = Date.now();
  }

  function dueAt(timer: 'idle-timeout' | 'warm-timeout'): number {
    return timer === 'idle-timeout' ? state.lastUseAt + timers.idleToWarmMs : state.phaseSince + timers.warmToColdMs;
  }

  /** Upserts only attributes that changed: every upsert is a history event. */
  function publish(): void {
    const now = { phase: state.phase, tier: state.tier, tokens: state.tokens, blocks: state.blocks };
    const changes: SearchAttributeUpdatePair[] = [];
    if (now.phase !== published.phase) changes.push({ key: KvPhase, value: now.phase });
    if (now.tier !== published.tier) changes.push({ key: KvTier, value: now.tier });
    if (now.tokens !== published.tokens) changes.push({ key: KvTokens, value: now.tokens });
    if (now.blocks !== published.blocks) changes.push({ key: KvBlocks, value: now.blocks });
    if (changes.length > 0) upsertSearchAttributes(changes);
    published = now;
  }

  function publishedAttributes(): { phase?: string; tier?: string; tokens?: number; blocks?: number } {
    const attributes = workflowInfo().typedSearchAttributes;
    return { phase: attributes.get(KvPhase), tier: attributes.get(KvTier), tokens: attributes.get(KvTokens), blocks: attributes.get(KvBlocks) };
  }

  // ---- validators: reject before anything is written to history ----

  function validator<A extends Credentials>(check?: (args: A) => void): (args: A) => void {
    return (args) => {
      if (state.phase === 'released') reject('INVALID_STATE', `agent ${agentId} is released`);
      if (typeof args !== 'object' || args === null || typeof args.capability !== 'string' || args.capability.length === 0) {
        reject('INVALID_ARGUMENT', 'a capability is required');
      }
      check?.(args);
    };
  }

  function checkTurn({ tokens, message, generation }: TurnArgs): void {
    if ((tokens === undefined) === (message === undefined)) reject('INVALID_ARGUMENT', 'a turn takes either a message or tokens');
    if (tokens !== undefined && (!Number.isSafeInteger(tokens) || tokens < 1 || tokens > config.maxTurnTokens)) {
      reject('INVALID_ARGUMENT', `tokens must be an integer in [1, ${config.maxTurnTokens}]`);
    }
    if (message !== undefined && (typeof message !== 'string' || message.length === 0 || message.length > MAX_MESSAGE_CHARS)) {
      reject('INVALID_ARGUMENT', `message must be a string of 1 to ${MAX_MESSAGE_CHARS} characters`);
    }
    if (generation !== undefined) checkGeneration(generation);
  }

  function checkGeneration(generation: TurnGeneration): void {
    if (typeof generation !== 'object' || generation === null) reject('INVALID_ARGUMENT', 'generation must be an object');
    const { maxTokens, temperature, seed } = generation;
    if (maxTokens !== undefined && (!Number.isSafeInteger(maxTokens) || maxTokens < 1 || maxTokens > MAX_REPLY_TOKENS)) {
      reject('INVALID_ARGUMENT', `generation.maxTokens must be an integer in [1, ${MAX_REPLY_TOKENS}]`);
    }
    if (temperature !== undefined && !(typeof temperature === 'number' && temperature >= 0 && temperature <= 2)) {
      reject('INVALID_ARGUMENT', 'generation.temperature must be a number in [0, 2]');
    }
    if (seed !== undefined && (!Number.isSafeInteger(seed) || seed < 0)) reject('INVALID_ARGUMENT', 'generation.seed must be an integer >= 0');
  }

  function checkSuspend({ tier }: SuspendArgs): void {
    if (tier !== 'host' && tier !== 'disk') reject('INVALID_ARGUMENT', "tier must be 'host' or 'disk'");
    if (state.pinned) reject('INVALID_STATE', `agent ${agentId} is pinned: unpin it first`);
  }

  function checkRenew({ next, nextCustodian }: RenewArgs): void {
    if (typeof next !== 'string' || next.length === 0) reject('INVALID_ARGUMENT', 'a replacement capability is required');
    if (typeof nextCustodian !== 'string' || nextCustodian.length === 0) reject('INVALID_ARGUMENT', "the replacement's custodian token is required");
  }

  function checkFork({ childId, childCapability, childCustodian }: ForkArgs): void {
    if (!isAgentId(childId) || childId === agentId) {
      reject('INVALID_ARGUMENT', 'childId must be 1 to 128 letters, digits, ".", "_", ":" or "-", and not the parent');
    }
    if (typeof childCapability !== 'string' || childCapability.length === 0) reject('INVALID_ARGUMENT', 'a child capability is required');
    if (typeof childCustodian !== 'string' || childCustodian.length === 0) reject('INVALID_ARGUMENT', "the child's custodian token is required");
  }
}

function reject(type: string, message: string): never {
  throw ApplicationFailure.create({ type, message, nonRetryable: true });
}

/** Patch id: calls on the holder retried by the workflow (one attempt per activity), not by the server. */
const WORKFLOW_SIDE_RETRIES = 'workflow-side-holder-retries';
/** Patch id: a failed fork's child context freed with the parent's capability (unshare). */
const UNSHARE_FAILED_FORK = 'unshare-failed-fork';
/** Patch id: a pinned agent's pin taken again on the worker that adopts it. */
const REPIN_AFTER_FAILOVER = 'repin-after-failover';
/** Patch id: a context in memory restored by a local activity when the workflow's worker holds it. */
const LOCAL_RESTORE = 'local-restore-on-holder';

/** The failover's recover found no durable copy it could adopt (missing, damaged or stale). */
function adoptionImpossible(err: unknown): boolean {
  return err instanceof ActivityFailure && err.activityType === 'recover' && failedWith(err, 'INTEGRITY');
}

function failedWith(err: unknown, code: string): boolean {
  return err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === code;
}

/** Worker loss: the call sat unserved on the holder's queue, its heartbeats stopped, or the holder no longer has the context. */
function holderLost(err: unknown): boolean {
  if (!(err instanceof ActivityFailure)) return false;
  const cause = err.cause;
  if (cause instanceof TimeoutFailure) return cause.timeoutType === 'SCHEDULE_TO_START' || cause.timeoutType === 'HEARTBEAT';
  return cause instanceof ApplicationFailure && cause.type === 'STALE_HANDLE';
}

/** A failure another attempt on the same holder may not have: what Temporal's own retry policy would retry. */
function retryable(err: unknown): boolean {
  if (!(err instanceof ActivityFailure)) return false;
  const cause = err.cause;
  if (cause instanceof TimeoutFailure) return cause.timeoutType === 'START_TO_CLOSE';
  return cause instanceof ApplicationFailure && !cause.nonRetryable;
}
