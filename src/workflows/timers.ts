// The agent's two timers: idle -> warm (host memory) and warm -> cold (disk), and a planned wake-up's
// prefetch (wake-ups.ts), whichever is due first. One timer at a time, restarted only when it fires or
// when the phase class or the plan changes (AgentRun.timerEpoch), never per turn: a turn just moves
// lastUseAt, and a timer that fires early sleeps the rest, so turns cost no timer events. The one
// exception: while a wake-up is planned, the idle timer that will follow its prefetch runs too, started
// with the plan, so that the prefetch's workflow task starts no timer (docs/agents.md#planned-wake-ups).
import { condition, log, workflowInfo } from '@temporalio/workflow';

import type { AgentOperations } from './agent-operations';
import type { AgentRun } from './agent-run';
import { DueTimers } from './due-timers';
import { timerOf } from './lifecycle';
import { wakeDueAt } from './wake-ups';

type Timer = 'idle-timeout' | 'warm-timeout';

/** Runs the timers until the agent is released or Temporal suggests continue-as-new. */
export async function runTimers(run: AgentRun, operations: AgentOperations): Promise<void> {
  const { state } = run;
  const timers = new DueTimers();
  while (!run.released && !workflowInfo().continueAsNewSuggested) {
    const timer = state.pinned ? undefined : timerOf(state.phase);
    const epoch = run.timerEpoch;
    const interrupted = () => run.released || run.timerEpoch !== epoch || workflowInfo().continueAsNewSuggested;
    const wake = wakeDueAt(run);
    const due = Math.min(timer === undefined ? Infinity : dueAt(run, timer), wake ?? Infinity);
    const afterWake = idleDueAfterWake(run);
    timers.keepOnly([due, afterWake ?? Infinity]);
    if (afterWake !== undefined) timers.start(afterWake);
    if (due === Infinity) {
      await condition(interrupted);
      continue;
    }
    if (due > Date.now()) {
      await timers.until(due, interrupted, (kept) => kept === idleDueAfterWake(run));
      continue;
    }
    if (wake !== undefined && wake <= Date.now()) {
      await run
        .operation(() => operations.prefetchForWake(() => (wakeDueAt(run) ?? Infinity) <= Date.now()))
        // Not tried again: the call where the context is needed brings it back on its own path.
        .catch((err: unknown) => log.warn('wake-up prefetch failed', { agentId: run.agentId, error: String(err) }));
      continue;
    }
    if (timer === undefined) continue;
    await run
      .operation(() => operations.suspendOnTimer(timer, () => Date.now() >= dueAt(run, timer)))
      .catch((err: unknown) => {
        // Try again one period later rather than spin; the failure is in the history and the log.
        state.lastUseAt = state.phaseSince = Date.now();
        log.warn('timed suspend failed', { agentId: run.agentId, timer, error: String(err) });
      });
  }
  timers.keepOnly([]);
}

/** Workflow time the timer fires: idle counts from the last use, warm from the phase's start. */
function dueAt(run: AgentRun, timer: Timer): number {
  const { state } = run;
  const { timers } = run.input.config;
  return timer === 'idle-timeout' ? state.lastUseAt + timers.idleToWarmMs : state.phaseSince + timers.warmToColdMs;
}

/**
 * While a wake-up is planned: when the idle timer is due after its prefetch, which counts the context as
 * used at the planned instant (AgentOperations.prefetchForWake). Undefined with no plan, or when pinned.
 */
function idleDueAfterWake(run: AgentRun): number | undefined {
  const { state } = run;
  if (state.wakeAt === undefined || state.pinned) return undefined;
  return Math.max(state.lastUseAt, state.wakeAt) + run.input.config.timers.idleToWarmMs;
}
