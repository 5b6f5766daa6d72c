// What each operation does to an agent: the updates' bodies (turn, suspend, resume, fork, pin, unpin,
// release, renew), the allocation at start and the timers' suspends. Each runs alone in the run's queue
// (AgentRun.operation), acts with the caller's capability (the timers and allocation with the agent's
// custodian token), and records only counts and digests.
import { log } from '@temporalio/workflow';

import { TIER_DEPTH } from '../fabric/tier';
import { agentWorkflowId } from '../identity/agent-identity';
import { startAgentChild } from './agent-child';
import type { AgentRun } from './agent-run';
import { initialState, statusOf } from './agent-state';
import { prefetch, resume } from './resume';
import type {
  AgentInput,
  AgentStatus,
  Credentials,
  ForkArgs,
  ForkOutcome,
  RenewArgs,
  SuspendArgs,
  TurnArgs,
  TurnOutcome,
  TurnReply,
} from './definitions';
import { adoptionImpossible, failedWith, refusal } from './failures';
import type { HolderCalls } from './holder-calls';
import { canTake, timerOf, type LifecycleEvent } from './lifecycle';
import { turnOnHolder } from './turn-on-holder';

export class AgentOperations {
  constructor(
    private readonly run: AgentRun,
    private readonly calls: HolderCalls,
  ) {}

  private get durable(): boolean {
    return this.run.input.config.durability === 'every-turn';
  }

  async allocate(): Promise<void> {
    const { run } = this;
    const { shape, tokensPerBlock } = run.input.model;
    const placed = await this.calls.placement.allocate({
      ...run.request(run.ownCapability()),
      shape,
      tokensPerBlock,
      checkpoint: this.durable,
    });
    run.place(placed);
    run.recordPages(placed.digest);
    run.recordSnapshot(placed);
    run.recordRevocation(placed.revokedBelow);
  }

  async turn({ capability, tokens, message, generation }: TurnArgs): Promise<TurnOutcome> {
    const { run } = this;
    const { state } = run;
    if (state.tier !== 'device') await resume(run, this.calls, capability);
    run.move('turn-started');
    let reply: TurnReply | undefined;
    try {
      // A message's token count is the model's to decide: any number may already be in flight.
      const input = tokens !== undefined ? { tokens } : { message: message!, ...(generation ? { generation } : {}) };
      const result = await turnOnHolder(run, this.calls, capability, {
        turn: state.turns,
        ...input,
        before: state.digest,
        tail: state.tail,
        checkpoint: this.durable,
        // Only a first turn reads it; sent only when it is not the worker's default.
        ...(run.input.config.sharing === 'none' ? { sharing: 'none' as const } : {}),
      });
      reply = result.reply;
      run.recordPages(result.digest, result.added);
      run.recordSnapshot(result);
      state.turns++;
      if (result.durable === false) {
        state.durableCopyStale = true;
        log.warn('disk full: the turn is in memory only until a later checkpoint succeeds', { agentId: run.agentId, turn: state.turns });
      } else if (result.durable) {
        delete state.durableCopyStale;
      }
    } finally {
      run.move('turn-finished');
      run.touch();
    }
    return {
      turns: state.turns,
      tokens: state.tokens,
      ...(reply ? { reply } : {}),
      ...(state.durableCopyStale ? { durableCopyStale: true as const } : {}),
    };
  }

  async suspend({ capability, tier }: SuspendArgs): Promise<AgentStatus> {
    const event = tier === 'host' ? 'suspended-host' : 'suspended-disk';
    if (!canTake(this.run.state.phase, event)) return this.run.status(); // already there, or deeper
    await this.suspendTo(capability, tier, event);
    return this.run.status();
  }

  async resume({ capability }: Credentials): Promise<AgentStatus> {
    // Even a resident context goes through the worker: the caller's capability is checked there, and a
    // resume always answers with bytes verified against the recorded digest.
    await resume(this.run, this.calls, capability);
    this.run.touch();
    return this.run.status();
  }

  async fork({ capability, childId, childCapability, childCustodian }: ForkArgs): Promise<ForkOutcome> {
    const { run } = this;
    const { state, input } = run;
    const forked = await this.calls.call((holder) =>
      holder.fork({
        ...run.request(capability),
        childId,
        childCapability,
        childCustodian,
        checkpoint: this.durable,
        expected: state.digest,
        tail: state.tail,
      }),
    );
    run.recordPages(forked.digest);
    run.recordSnapshot(forked.parent);
    const childInput: AgentInput = {
      agentId: childId,
      tenant: input.tenant,
      // The child's workflow carries its custodian, never its own token.
      capability: childCustodian,
      model: input.model,
      config: input.config,
      parent: {
        agentId: input.agentId,
        holder: state.holder!,
        ...(state.holderRunsWorkflows ? { holderRunsWorkflows: true } : {}),
        digest: state.digest,
        tier: forked.child.tier,
        blocks: forked.child.blocks,
        sharedBlocks: forked.child.sharedBlocks,
        revokedBelow: forked.childRevokedBelow,
      },
    };
    try {
      await startAgentChild(childInput);
    } catch (err) {
      // No workflow will ever own the child context: give its blocks back (with the parent's capability:
      // the child's is bound to the workflow that did not start), then report.
      try {
        run.recordSnapshot(
          await this.calls.call((holder) =>
            holder.unfork({ ...run.request(capability), childId, childCapability, childCustodian, checkpoint: false }),
          ),
        );
      } catch (undo) {
        log.warn('the child context of a failed fork was not freed', { agentId: run.agentId, childId, error: String(undo) });
      }
      throw refusal('INVALID_ARGUMENT', `cannot start agent ${childId}: ${String(err)}`);
    }
    state.forks++;
    run.touch();
    return { childId, workflowId: agentWorkflowId(childId), child: statusOf(childInput, initialState(childInput)) };
  }

  async pin({ capability }: Credentials): Promise<AgentStatus> {
    const { run } = this;
    if (run.state.tier !== 'device') await resume(run, this.calls, capability);
    run.recordSnapshot(await this.calls.call((holder) => holder.pin(run.request(capability))));
    run.timerEpoch++;
    run.touch();
    return run.status();
  }

  async unpin({ capability }: Credentials): Promise<AgentStatus> {
    const { run } = this;
    if (!run.state.pinned) return run.status();
    run.recordSnapshot(await this.calls.call((holder) => holder.unpin(run.request(capability))));
    run.timerEpoch++;
    run.touch();
    return run.status();
  }

  async release({ capability }: Credentials): Promise<AgentStatus> {
    const { run } = this;
    try {
      await this.calls.call((holder) => holder.release(run.request(capability)));
    } catch (err) {
      if (!adoptionImpossible(err)) throw err;
      // The holder is gone and no durable copy can be adopted: there are no bytes left to free, only the
      // grant, the tokens and whatever files remain. Any worker ends those.
      log.warn('context lost with its holder; releasing what is left', { agentId: run.agentId, error: String(err) });
      await this.calls.placement.retire(run.request(capability)).catch((retireErr: unknown) => {
        // A retried retire whose first attempt finished elsewhere finds no grant: already done.
        if (!failedWith(retireErr, 'STALE_HANDLE')) throw retireErr;
      });
    }
    run.move('released');
    Object.assign(run.state, { tier: 'none', holder: null, blocks: 0, sharedBlocks: 0, pinned: false });
    return run.status();
  }

  /**
   * Replaces the token the workflow acts with on its own (timers, failover) by the replacement's
   * custodian: the worker checks both and revokes every older token of the context, the presented one
   * and the custodian carried so far included.
   */
  async renew({ capability, next, nextCustodian }: RenewArgs): Promise<AgentStatus> {
    const { run } = this;
    const renewed = await this.calls.call((holder) => holder.renew({ ...run.request(capability), next, nextCustodian }));
    run.state.capability = nextCustodian;
    run.recordRevocation(renewed.revokedBelow);
    return run.status();
  }

  /** A timer's suspend, with the agent's custodian token: idle -> host, warm -> disk. */
  async suspendOnTimer(timer: 'idle-timeout' | 'warm-timeout', due: () => boolean): Promise<void> {
    const { state } = this.run;
    // Re-checked under the queue: a turn or a suspend may have run since the timer fired.
    if (state.pinned || timerOf(state.phase) !== timer || !canTake(state.phase, timer) || !due()) return;
    await this.suspendTo(this.run.ownCapability(), timer === 'idle-timeout' ? 'host' : 'disk', timer);
  }

  /**
   * A planned wake-up's prefetch, once due (wake-ups.ts), with the agent's custodian token. The plan is
   * used up either way; a context it finds resident, or brings back, counts as used at the planned instant,
   * so unused it falls back under the idle timers from then.
   */
  async prefetchForWake(due: () => boolean): Promise<void> {
    const { run } = this;
    const { state } = run;
    const at = state.wakeAt;
    // Re-checked under the queue: a cancel or a new plan may have come since the timer fired.
    if (at === undefined || !due()) return;
    delete state.wakeAt;
    state.lastUseAt = Math.max(state.lastUseAt, at);
    if (state.pinned || state.tier === 'device') return;
    await prefetch(run, this.calls);
    // Stopped in host memory: the warm timer counts from the planned instant too.
    if (state.phase === 'warm') state.phaseSince = Math.max(state.phaseSince, at);
  }

  private async suspendTo(capability: string, tier: 'host' | 'disk', event: LifecycleEvent): Promise<void> {
    const { run } = this;
    const suspended = await this.calls.call(async (holder) =>
      // After a failover the context is already on disk: nothing to move.
      run.state.tier !== 'none' && TIER_DEPTH[run.state.tier] >= TIER_DEPTH[tier]
        ? undefined
        : holder.suspend({ ...run.request(capability), tier, expected: run.state.digest, tail: run.state.tail }),
    );
    if (suspended) {
      run.recordPages(suspended.digest);
      run.recordSnapshot(suspended);
    }
    if (tier === 'disk') delete run.state.durableCopyStale;
    run.move(event);
  }
}
