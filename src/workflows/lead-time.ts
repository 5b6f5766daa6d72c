// How long before a planned wake-up the agent's workflow starts bringing the context back: the context's
// size now over the throughput of this agent's own last resume that moved bytes (bytes moved, over the
// time to move, check and load them), with a margin, and never under a floor that covers a workflow task
// and an activity's dispatch. Pure, from the workflow's state: the same on every replay.
import { bytesPerTokenOf } from '../fabric/layout';
import type { AgentInput, AgentState, ResumeFigures } from './definitions';

/** The least lead: a workflow task, the activity's dispatch to the holder and its answer, on a busy machine. */
export const WAKE_LEAD_FLOOR_MS = 2_000;
/** Restores vary with the disk's and the engine's load: twice the learned time. */
export const WAKE_LEAD_MARGIN = 2;
/** Before the agent's first resume that moved bytes: 100 MB/s, slower than any restore measured here (docs/benchmarks.md). */
const UNMEASURED_BYTES_PER_MS = 100_000;

export function leadTimeMs(input: AgentInput, state: AgentState): number {
  const bytes = state.tokens * bytesPerTokenOf(input.model.shape);
  const bytesPerMs = state.restore ? state.restore.bytes / Math.max(state.restore.ms, 1) : UNMEASURED_BYTES_PER_MS;
  return Math.max(WAKE_LEAD_FLOOR_MS, Math.ceil((WAKE_LEAD_MARGIN * bytes) / bytesPerMs));
}

/** Learns from a resume's figures: only one that moved bytes says how fast this agent's context comes back. */
export function learnResumeSpeed(state: AgentState, resumed: ResumeFigures): void {
  if (resumed.bytes > 0) state.restore = { bytes: resumed.bytes, ms: resumed.transferMs + resumed.verifyMs + resumed.engineLoadMs };
}
