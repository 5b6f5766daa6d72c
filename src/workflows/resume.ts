// Resuming an agent's context: back to the device, wherever it is: in the workflow task itself when the
// worker running the task holds it in memory, else through the holder's queue (failover included). The
// worker verifies what came back against the digest the workflow recorded; the workflow checks the count.
import { bytesPerTokenOf } from '../fabric/layout';
import type { HolderActivities, ResumeRequest, ResumeResult } from '../activities/types';
import type { AgentRun } from './agent-run';
import { refusal } from './failures';
import type { HolderCalls } from './holder-calls';
import { learnResumeSpeed } from './lead-time';
import { canTake } from './lifecycle';

/** Whatever the tier -> resident, verified; the phase moves to `resumed` where the lifecycle has one. */
export async function resume(run: AgentRun, calls: HolderCalls, capability: string): Promise<void> {
  if (!(await resumeLocally(run, calls, capability))) await calls.call((holder) => resumeOnHolder(run, holder, capability, 0));
  if (canTake(run.state.phase, 'resumed')) run.move('resumed');
}

/**
 * A planned wake-up's prefetch (wake-ups.ts), with the agent's custodian token: the holder's `wake`, a
 * resume that makes no room: in the workflow task when the worker running it holds the context, else
 * through the holder's queue or, when the holder is gone, on the worker that adopts the context.
 * On the device the agent is then `idle`, where a resident one waits: the first call moves nothing and
 * costs a hot call's events, the search attributes published here already. Without free room on the
 * device it stops short: from disk in host memory (warm, as after an idle timer), else where it was;
 * nothing reached the engine, so the record of its pages stays.
 */
export async function prefetch(run: AgentRun, calls: HolderCalls): Promise<void> {
  const request = resumeRequest(run, run.ownCapability());
  const holder = run.state.holder;
  const local =
    holder !== null && run.state.holderRunsWorkflows ? await calls.locally((l) => l.wakeIfHolder({ ...request, holder })) : null;
  const resumed = local ?? (await calls.call((onHolder) => onHolder.wake(request)));
  if (resumed.tier !== 'device') {
    run.recordSnapshot(resumed);
    if (resumed.tier === 'host' && canTake(run.state.phase, 'prefetched-host')) run.move('prefetched-host');
    return;
  }
  recordResumed(run, resumed, 0);
  if (canTake(run.state.phase, 'prefetched-device')) run.move('prefetched-device');
}

/**
 * Resumes on `holder`. The context may hold `inFlightTokens` more than recorded: a turn whose worker was
 * lost after the turn reached the durable copy; the turn's own activity then checks them.
 */
export async function resumeOnHolder(
  run: AgentRun,
  holder: HolderActivities,
  capability: string,
  inFlightTokens: number | 'any',
): Promise<void> {
  recordResumed(run, await holder.resume(resumeRequest(run, capability)), inFlightTokens);
}

/** False when the worker running this task is not the holder, or the context is not in memory. */
async function resumeLocally(run: AgentRun, calls: HolderCalls, capability: string): Promise<boolean> {
  const { state } = run;
  // Only a holder that runs agent workflows can be the worker running this task.
  const holder = state.holder;
  if (holder === null || !state.holderRunsWorkflows || (state.tier !== 'device' && state.tier !== 'host')) return false;
  const resumed = await calls.locally((local) => local.resumeIfHolder({ ...resumeRequest(run, capability), holder }));
  if (resumed === null) return false;
  recordResumed(run, resumed, 0);
  return true;
}

function resumeRequest(run: AgentRun, capability: string): ResumeRequest {
  return { ...run.request(capability), expected: run.state.digest, tail: run.state.tail };
}

/**
 * Records a resume's result: its token count checked against the recorded one, then its snapshot and
 * figures. Pages longer than recorded by at most the tail have caught up with it (the worker checked the
 * ids); longer by a turn in flight, the turn's own activity checks them, so the record stays.
 */
function recordResumed(run: AgentRun, resumed: ResumeResult, inFlightTokens: number | 'any'): void {
  const { state } = run;
  const extra = resumed.tokens - state.digest.tokens;
  const caughtUp = extra >= 0 && extra <= state.tail.length;
  if (!caughtUp && extra !== inFlightTokens && !(inFlightTokens === 'any' && extra > 0)) {
    throw refusal('INTEGRITY', `context came back with ${resumed.tokens} tokens; the workflow recorded ${state.digest.tokens}`);
  }
  if (caughtUp) run.recordPages(resumed.digest);
  run.recordSnapshot(resumed);
  state.lastResume = {
    bytes: resumed.bytes,
    transferMs: resumed.transferMs,
    verifyMs: resumed.verifyMs,
    engineLoadMs: resumed.engineLoadMs,
    from: resumed.from,
  };
  learnResumeSpeed(state, state.lastResume, resumed.tokens * bytesPerTokenOf(run.input.model.shape));
}
