// Planned wake-ups. The workflow that owns an agent says when the agent's context is needed again: the
// update `wake` from a client, or the signal of the same name from workflow code (sleepThenWake), since a
// workflow cannot update another. Either is admitted only with the proof of the custodian token the
// agent's workflow carries (as holderLeft), which the workflow that started the agent holds. The timers
// (timers.ts) then wait for the earlier of their own due time and the wake-up less its lead time
// (lead-time.ts), and the prefetch runs the resume path with the custodian token (resume.ts): on the
// holder, or on whichever worker adopts the context when the holder is gone. A prefetched context nobody
// uses falls back under the idle timers from the planned instant; a plan cancelled or moved after its
// prefetch lets the context fall back from then. One plan at a time: a new one replaces the old.
import { log, setHandler } from '@temporalio/workflow';

import type { AgentRun } from './agent-run';
import { wakeSignal, wakeUpdate, type WakeArgs } from './definitions';
import { leadTimeMs } from './lead-time';
import { checkCustodyProof, checkWake } from './update-validators';
import { refusal } from './failures';

export function handleWakes(run: AgentRun): void {
  setHandler(
    wakeUpdate,
    ({ at }: WakeArgs) => {
      plan(run, at);
      return run.status();
    },
    { validator: (args: WakeArgs) => checkWakeArgs(args, run) },
  );
  // A signal has no validator: a refused one is in the history, and only counted and logged.
  setHandler(wakeSignal, (args: WakeArgs) => {
    try {
      checkWakeArgs(args, run);
    } catch (err) {
      run.state.denials++;
      log.warn('wake-up refused', { agentId: run.agentId, error: String(err) });
      return;
    }
    plan(run, args.at);
  });
}

/** Workflow time the prefetch of the planned wake-up is due; undefined when none is planned. */
export function wakeDueAt(run: AgentRun): number | undefined {
  const { state } = run;
  return state.wakeAt === undefined ? undefined : state.wakeAt - leadTimeMs(run.input, state);
}

function plan(run: AgentRun, at: number | null): void {
  const { state } = run;
  const now = Date.now();
  // A context prefetched for the plan this replaces falls back under the idle timers from now.
  if (state.lastUseAt > now) state.lastUseAt = now;
  if (at === null) delete state.wakeAt;
  else state.wakeAt = at;
  run.timerEpoch++;
}

function checkWakeArgs(args: unknown, run: AgentRun): void {
  if (run.released) throw refusal('INVALID_STATE', `agent ${run.agentId} is released`);
  const wake = (typeof args === 'object' && args !== null ? args : {}) as Partial<Record<keyof WakeArgs, unknown>>;
  checkCustodyProof(wake.proof, run.ownCapability(), 'wake');
  checkWake({ at: wake.at as number | null, proof: wake.proof as string }, Date.now());
}
