// One run of an agent workflow: its input and state, the queue its operations wait in, and the small
// moves every room makes on the state (a lifecycle event, a snapshot from a worker, a touch). The rooms
// (updates, operations, holder calls, timers) share one AgentRun; nothing here calls an activity.
import { ApplicationFailure } from '@temporalio/workflow';

import type { ContextRequest, ContextSnapshot, DigestState, Placement } from '../activities/types';
import type { AgentInput, AgentState, AgentStatus } from './definitions';
import { initialState, statusOf } from './agent-state';
import { canTake, next, timerOf, type LifecycleEvent } from './lifecycle';
import { OperationQueue } from './operation-queue';
import { AttributePublisher } from './attribute-publisher';

export class AgentRun {
  readonly state: AgentState;
  private readonly queue = new OperationQueue();
  private readonly attributes = new AttributePublisher();
  /** Bumped when the timer that applies changes (phase class, pin): the running wait starts over. */
  timerEpoch = 0;

  constructor(readonly input: AgentInput) {
    this.state = input.carried ?? initialState(input);
  }

  get agentId(): string {
    return this.input.agentId;
  }

  get released(): boolean {
    return this.state.phase === 'released';
  }

  /** No operation is running or waiting. */
  get idle(): boolean {
    return this.queue.idle;
  }

  status(): AgentStatus {
    return statusOf(this.input, this.state);
  }

  /**
   * Runs `body` alone, after every operation that arrived before it, and publishes the search attributes
   * when it moved the agent (AttributePublisher). A released agent takes no operation.
   */
  operation<T>(body: () => Promise<T>): Promise<T> {
    return this.queue.run(async () => {
      if (this.released)
        throw ApplicationFailure.create({ type: 'INVALID_STATE', message: `agent ${this.agentId} is released`, nonRetryable: true });
      try {
        return await body();
      } finally {
        this.attributes.publish(this.state);
      }
    });
  }

  /**
   * A call's common fields with the next operation id, which the workflow's retries of the call repeat. A
   * failover's re-run on the new holder is a new call (a turn the lost holder applied is recognised by its
   * tokens: TurnResult.alreadyApplied).
   */
  request(capability: string): ContextRequest {
    const operationId = `${this.agentId}:${this.state.nextOperation++}`;
    return { agentId: this.agentId, tenant: this.input.tenant, capability, operationId, revokedBelow: this.state.revokedBelow };
  }

  /**
   * The token the workflow acts with when no caller gave one (allocation, timers, failover): the
   * custodian of the latest renewal, else the one it started with.
   */
  ownCapability(): string {
    return this.state.capability ?? this.input.capability;
  }

  move(event: LifecycleEvent): void {
    const to = next(this.state.phase, event);
    if (timerOf(to) !== timerOf(this.state.phase)) this.timerEpoch++;
    if (to !== this.state.phase) this.state.phaseSince = Date.now();
    this.state.phase = to;
  }

  place(placed: Placement): void {
    this.state.holder = placed.holder;
    if (placed.holderRunsWorkflows) this.state.holderRunsWorkflows = true;
    else delete this.state.holderRunsWorkflows;
  }

  /**
   * The holder left on purpose, its context written to disk (holder-left.ts): nobody holds it until the
   * next call adopts it on another worker, as after a failover.
   */
  holderLeft(): void {
    const { state } = this;
    state.holder = null;
    delete state.holderRunsWorkflows;
    state.tier = 'disk';
    if (canTake(state.phase, 'holder-lost')) this.move('holder-lost');
    this.attributes.publish(state);
  }

  /** The revocation epoch a worker raised for this context (allocation, fork, renewal): the highest seen is kept. */
  recordRevocation(epoch: number): void {
    this.state.revokedBelow = Math.max(this.state.revokedBelow ?? 0, epoch);
  }

  /** A worker's snapshot: where the context is and how big (its pages, or the conversation when longer). */
  recordSnapshot(snapshot: ContextSnapshot): void {
    const { state } = this;
    state.tier = snapshot.tier;
    state.tokens = Math.max(snapshot.tokens, state.digest.tokens + state.tail.length);
    state.blocks = snapshot.blocks;
    state.sharedBlocks = snapshot.sharedBlocks;
    state.pinned = snapshot.pinned;
    // The highest seen: a snapshot taken before a later durable copy never lowers the record.
    state.durableVersion = Math.max(state.durableVersion, snapshot.durableVersion);
  }

  /**
   * The digest of the pages a worker reported, and the token ids a model turn added: the tail keeps the
   * ids the pages do not hold yet. Pages never go back (INTEGRITY); a synthetic turn's pages move past an
   * empty tail.
   */
  recordPages(digest: DigestState, added: readonly number[] = []): void {
    const { state } = this;
    const caughtUp = digest.tokens - state.digest.tokens;
    if (caughtUp < 0) {
      throw ApplicationFailure.create({
        type: 'INTEGRITY',
        message: `a worker reported ${digest.tokens} tokens of pages; the workflow recorded ${state.digest.tokens}`,
        nonRetryable: true,
      });
    }
    state.tail = [...state.tail, ...added].slice(caughtUp);
    state.digest = digest;
    state.tokens = Math.max(state.tokens, digest.tokens + state.tail.length);
  }

  touch(): void {
    this.state.lastUseAt = Date.now();
  }
}
