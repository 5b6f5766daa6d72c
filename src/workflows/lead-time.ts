// How long before a planned wake-up the agent's workflow starts bringing the context back: the context's
// size now at this agent's own measured speeds, with a margin, and never under a floor that covers a
// workflow task and an activity's dispatch. Two speeds, since a resume does two things of different sizes:
// it moves the pages that are not on the device (from where the context is now: host or disk, each learned
// from the last resume that moved bytes from there), then checks and loads the whole context into the
// engine (learned from the last resume that did). One speed for both extrapolated a resume that moved a
// partial block but loaded the whole context into a lead a hundred times too long. Pure, from the
// workflow's state: the same on every replay.
import { bytesPerTokenOf } from '../fabric/layout';
import type { AgentInput, AgentState, ResumeFigures, RestoreSpeeds, Throughput } from './definitions';

/** The least lead: a workflow task, the activity's dispatch to the holder and its answer, on a busy machine. */
export const WAKE_LEAD_FLOOR_MS = 2_000;
/** Restores vary with the disk's and the engine's load: twice the learned time. */
export const WAKE_LEAD_MARGIN = 2;
/** A move not measured yet: 100 MB/s, slower than any restore measured here (docs/benchmarks.md). */
const UNMEASURED_MOVE: Throughput = { bytes: 100_000, ms: 1 };

export function leadTimeMs(input: AgentInput, state: AgentState): number {
  const bytes = state.tokens * bytesPerTokenOf(input.model.shape);
  const speeds = state.restore ?? {};
  const from = state.tier === 'host' || state.tier === 'disk' ? state.tier : undefined;
  const moveMs = from === undefined ? 0 : msFor(bytes, speeds[from] ?? UNMEASURED_MOVE);
  const loadMs = speeds.load ? msFor(bytes, speeds.load) : 0;
  return Math.max(WAKE_LEAD_FLOOR_MS, Math.ceil(WAKE_LEAD_MARGIN * (moveMs + loadMs)));
}

/**
 * Learns from a resume's figures: a move from host or disk that moved bytes, and a check and load of the
 * whole context (`contextBytes`, its size as resumed) that took time.
 */
export function learnResumeSpeed(state: AgentState, resumed: ResumeFigures, contextBytes: number): void {
  const speeds: RestoreSpeeds = { ...state.restore };
  if (resumed.bytes > 0 && (resumed.from === 'host' || resumed.from === 'disk')) {
    speeds[resumed.from] = { bytes: resumed.bytes, ms: resumed.transferMs };
  }
  const loadMs = resumed.verifyMs + resumed.engineLoadMs;
  if (loadMs > 0 && contextBytes > 0) speeds.load = { bytes: contextBytes, ms: loadMs };
  if (Object.keys(speeds).length > 0) state.restore = speeds;
}

/** Time to handle `bytes` at a measured speed (its time at least 1 ms). */
function msFor(bytes: number, speed: Throughput): number {
  return (bytes * Math.max(speed.ms, 1)) / speed.bytes;
}
