// The agent's two timers: idle -> warm (host memory) and warm -> cold (disk), and a planned wake-up's
// prefetch (wake-ups.ts), whichever is due first. One timer at a time, restarted only when it fires or
// when the phase class or the plan changes (AgentRun.timerEpoch), never per turn: a turn just moves
// lastUseAt, and a timer that fires early sleeps the rest, so turns cost no timer events.
import { condition, log, workflowInfo } from '@temporalio/workflow';

import type { AgentOperations } from './agent-operations';
import type { AgentRun } from './agent-run';
import { timerOf } from './lifecycle';
import { wakeDueAt } from './wake-ups';

type Timer = 'idle-timeout' | 'warm-timeout';

/** Runs the timers until the agent is released or Temporal suggests continue-as-new. */
export async function runTimers(run: AgentRun, operations: AgentOperations): Promise<void> {
  const { state } = run;
  while (!run.released && !workflowInfo().continueAsNewSuggested) {
    const timer = state.pinned ? undefined : timerOf(state.phase);
    const epoch = run.timerEpoch;
    const interrupted = () => run.released || run.timerEpoch !== epoch || workflowInfo().continueAsNewSuggested;
    const wake = wakeDueAt(run);
    const due = Math.min(timer === undefined ? Infinity : dueAt(run, timer), wake ?? Infinity);
    if (due === Infinity) {
      await condition(interrupted);
      continue;
    }
    const wait = due - Date.now();
    if (wait > 0) {
      await condition(interrupted, wait);
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
}

/** Workflow time the timer fires: idle counts from the last use, warm from the phase's start. */
function dueAt(run: AgentRun, timer: Timer): number {
  const { state } = run;
  const { timers } = run.input.config;
  return timer === 'idle-timeout' ? state.lastUseAt + timers.idleToWarmMs : state.phaseSince + timers.warmToColdMs;
}
