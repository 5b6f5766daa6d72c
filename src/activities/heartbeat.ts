// Every call on a context heartbeats while it runs, so a worker that dies mid-transfer is noticed within
// the heartbeat timeout rather than the transfer's whole start-to-close budget. Details carry progress
// (phase, tokens, verified tokens) for the UI's pending-activity view.
import { Context } from '@temporalio/activity';

const HEARTBEAT_EVERY_MS = 1000;

export type Progress = Record<string, string | number | boolean>;

/** Heartbeats `progress()` now and every second until `work` settles. Outside an activity it just runs. */
export async function withHeartbeat<T>(progress: () => Progress, work: () => Promise<T>): Promise<T> {
  const context = currentContext();
  // Local activities cannot heartbeat: the workflow task they run in carries them.
  if (!context || context.info.isLocal) return work();
  const started = Date.now();
  const beat = (): void => context.heartbeat({ ...progress(), elapsedMs: Date.now() - started });
  beat();
  const timer = setInterval(beat, HEARTBEAT_EVERY_MS);
  try {
    return await work();
  } finally {
    clearInterval(timer);
  }
}

function currentContext(): Context | undefined {
  try {
    return Context.current();
  } catch {
    return undefined; // called from a test or the drain, not from an activity
  }
}
