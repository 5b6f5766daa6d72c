// Running a turn on the worker that holds the context: in the workflow task itself when the worker running
// the task holds the context on the device (a local activity: the update's one workflow task records the
// turn as a marker, so a hot turn adds six events to the history: docs/agents.md#a-turns-history), else
// through the holder's queue, where heartbeats, failover and retries apply. Either way the worker admits
// the turn alike and applies it at most once per operation id (its journal), which both ways share.
import type { TurnFields, TurnRequest, TurnResult } from '../activities/types';
import type { AgentRun } from './agent-run';
import { resumeOnHolder } from './resume';
import type { HolderCalls } from './holder-calls';

/** The turn's result from whichever worker ran it; the caller records it. */
export async function turnOnHolder(run: AgentRun, calls: HolderCalls, capability: string, asked: TurnFields): Promise<TurnResult> {
  const { state } = run;
  const request = (): TurnRequest => ({ ...run.request(capability), ...asked });
  // The local attempt's request goes on to the holder's queue unchanged: a local turn that applied and then
  // failed (its answer lost) is answered there from the journal, never applied twice.
  let first: TurnRequest | undefined;
  const holder = state.holder;
  // Only a holder that runs agent workflows can be the worker running this task.
  if (holder !== null && state.holderRunsWorkflows && state.tier === 'device') {
    first = request();
    const done = await calls.locally((local) => local.turnIfHolder({ ...first!, holder }));
    if (done !== null) return done;
  }
  return calls.call(async (on) => {
    // After a failover the context is on disk at its new holder; the turn may already be in it.
    if (state.tier !== 'device') await resumeOnHolder(run, on, capability, asked.tokens ?? 'any');
    // A failover's re-run on the new holder is a new call (AgentRun.request).
    const next = first ?? request();
    first = undefined;
    return on.turn(next);
  });
}
