// The agent workflow's calls to workers: placement calls on the shared queue, calls on the holder's own
// queue with the workflow's retries, local calls in the workflow task (a resume, a turn), and failover:
// when the holder is gone, another worker adopts the context from the cold tier and the call runs there.
// A holder that says it left (holder-left.ts) is gone at once: its calls still waiting are cancelled.
import { CancellationScope, TemporalFailure, log, proxyActivities, proxyLocalActivities, sleep } from '@temporalio/workflow';

import type { HolderActivities, LocalActivities, PlacementActivities } from '../activities/types';
import type { AgentRun } from './agent-run';
import { canTake } from './lifecycle';
import { decisiveLocalFailure, holderLost, retryable } from './failures';

export class HolderCalls {
  /** Any GPU worker may take these; the one that does holds the context afterwards. */
  readonly placement: PlacementActivities;
  private readonly local: LocalActivities;
  /** Calls waiting on a holder's queue (or between their attempts there), by holder: what holderLeft cancels. */
  private readonly waiting = new Map<string, Set<CancellationScope>>();
  /** Those cancelled because their holder left: they fail over, as a call its holder never took does. */
  private readonly abandoned = new Set<CancellationScope>();

  constructor(private readonly run: AgentRun) {
    const { timeouts } = run.input.config;
    this.placement = proxyActivities<PlacementActivities>({
      startToCloseTimeout: timeouts.attemptMs,
      heartbeatTimeout: timeouts.heartbeatMs,
      // Retryable errors (pool exhausted, disk full) are retried until this; then the operation fails.
      scheduleToCloseTimeout: timeouts.operationMs,
      retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '10s' },
    });
    // Run in the workflow task by the worker that runs it: one attempt; see locally.
    this.local = proxyLocalActivities<LocalActivities>({ startToCloseTimeout: timeouts.attemptMs, retry: { maximumAttempts: 1 } });
  }

  /**
   * Runs a call on the holder. When the holder is gone (its queue unserved past holderLossMs, its
   * heartbeats stopped, or it no longer has the context), another worker adopts the context from the
   * cold tier and the call runs there, once.
   */
  async call<T>(call: (holder: HolderActivities) => Promise<T>): Promise<T> {
    const { state } = this.run;
    for (let attempt = 0; ; attempt++) {
      if (state.holder === null) await this.failover();
      try {
        return await call(this.on(state.holder!));
      } catch (err) {
        if (attempt > 0 || !(holderLost(err) || err instanceof HolderLeft)) throw err;
        log.warn('holder lost', { agentId: this.run.agentId, holder: state.holder, error: String(err) });
        state.holder = null;
      }
    }
  }

  /**
   * A call on a context in memory, in the workflow task itself, when the worker running that task holds
   * it: one workflow task and no activity dispatch through the server. Null when that worker is not the
   * holder (or the context is not where the local call acts), or when the local call failed in a way the
   * holder's queue may not: the caller then goes through the holder's queue, where heartbeats, failover
   * and retries apply. Throws only a decisive failure (a denial, counted; damaged bytes).
   */
  async locally<T>(call: (local: LocalActivities) => Promise<T | null>): Promise<T | null> {
    try {
      return await call(this.local);
    } catch (err) {
      // Not an activity's failure: this worker lacks the local activity (it runs the agent workflow without
      // the kvfabric plugin). Falling back here would record a history that replays differently on a
      // kvfabric worker, so the workflow task fails instead, and Temporal retries it, on any worker.
      if (!(err instanceof TemporalFailure)) {
        throw new Error(
          "this worker runs agent workflows without kvfabric's activities while GPU workers run them too; " +
            `run agent workflows on kvfabric workers only (${String(err)})`,
        );
      }
      const decisive = decisiveLocalFailure(err);
      if (decisive?.type === 'PERMISSION_DENIED') this.run.state.denials++;
      if (decisive) throw decisive;
      log.info('local call not done; asking the holder', { agentId: this.run.agentId, error: String(err) });
      return null;
    }
  }

  /**
   * The holder said it left, its contexts on disk (holder-left.ts): its calls still waiting on its queue
   * are cancelled, and each fails over at once instead of after holderLossMs. None of them has started:
   * a worker leaves only once every call it took has finished.
   */
  holderLeft(holder: string): void {
    for (const scope of this.waiting.get(holder) ?? []) {
      this.abandoned.add(scope);
      scope.cancel();
    }
  }

  /** Adopts the context on whichever worker takes the recover, and takes the old holder's pin there again. */
  private async failover(): Promise<void> {
    const { run } = this;
    const { state } = run;
    const wasPinned = state.pinned;
    const placed = await this.placement.recover({
      ...run.request(run.ownCapability()),
      epoch: state.failovers + 1,
      minVersion: state.durableVersion,
    });
    run.place(placed);
    run.recordSnapshot(placed);
    state.failovers++;
    // The pin died with the old holder (pins hold at any tier).
    if (wasPinned) run.recordSnapshot(await this.on(placed.holder).pin(run.request(run.ownCapability())));
    if (canTake(state.phase, 'holder-lost')) run.move('holder-lost');
    log.info('context adopted from the cold tier', { agentId: run.agentId, holder: placed.holder });
  }

  /**
   * Calls on one holder's queue. Each activity gets one attempt, and the workflow retries retryable
   * failures (pool exhausted, busy, disk full, an attempt past attemptMs) with the same arguments (so the
   * worker's journal answers a repeated operation) and backoff, until operationMs. Temporal's own retry
   * would send a retry after a heartbeat timeout to the same queue, where a frozen (not dead) worker's
   * pending polls swallow it: the workflow must see that timeout to fail over (call).
   */
  private on(holder: string): HolderActivities {
    const { timeouts } = this.run.input.config;
    const once = proxyActivities<HolderActivities>({
      taskQueue: holder,
      // The holder's queue dies with its worker: a call nobody takes in this long means the worker is gone.
      scheduleToStartTimeout: timeouts.holderLossMs,
      startToCloseTimeout: timeouts.attemptMs,
      heartbeatTimeout: timeouts.heartbeatMs,
      retry: { maximumAttempts: 1 },
    });
    return new Proxy(once, {
      get: (target, name: keyof HolderActivities) => (request: never) =>
        this.untilLeft(holder, () => this.retried(() => (target[name] as (request: never) => Promise<unknown>)(request))),
    });
  }

  /** Runs a call on `holder` in a scope holderLeft(holder) cancels; a call so cancelled throws HolderLeft. */
  private async untilLeft<T>(holder: string, work: () => Promise<T>): Promise<T> {
    const scope = new CancellationScope();
    const scopes = this.waiting.get(holder) ?? new Set<CancellationScope>();
    this.waiting.set(holder, scopes.add(scope));
    try {
      return await scope.run(work);
    } catch (err) {
      if (this.abandoned.has(scope)) throw new HolderLeft(holder);
      throw err;
    } finally {
      this.abandoned.delete(scope);
      scopes.delete(scope);
      if (scopes.size === 0) this.waiting.delete(holder);
    }
  }

  private async retried<T>(attempt: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + this.run.input.config.timeouts.operationMs;
    for (let backoffMs = 200; ; backoffMs = Math.min(backoffMs * 2, 10_000)) {
      try {
        return await attempt();
      } catch (err) {
        if (!retryable(err) || Date.now() + backoffMs > deadline) throw err;
        await sleep(backoffMs);
      }
    }
  }
}

/** A call cancelled because its holder said it left: the call fails over. */
class HolderLeft extends Error {
  constructor(holder: string) {
    super(`holder ${holder} left`);
    this.name = 'HolderLeft';
  }
}
