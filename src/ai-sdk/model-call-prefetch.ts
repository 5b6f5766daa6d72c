// What a planned wake-up's prefetch of an AI SDK run's KV reports (ModelCallMemory.prefetch): the outcome
// it is counted by in kvfabric_prefetch{outcome}, named as an agent's prefetch names it, and the figures
// the workflow's next lead time learns from (src/workflows/model-memory.ts).
import type { PrefetchOutcome } from '../agent-memory/agent-memory';
import type { MoveReport } from '../tiers/tiered-memory';

/** An agent's outcomes, and `none`: the run holds no KV, here or in the cold tier (no call yet, or freed). */
export type ModelCallPrefetchOutcome = PrefetchOutcome | 'none';

export interface ModelCallPrefetch {
  outcome: ModelCallPrefetchOutcome;
  /** Bytes brought up a tier (0 when nothing moved). */
  bytes: number;
  /** Time to adopt, move and load them into the engine, in ms. */
  ms: number;
  /** The run's whole KV now, in bytes. */
  contextBytes: number;
}

/**
 * How long past now a prefetch may put off the KV's idle timers (its planned instant, clamped): a wake-up's
 * lead is seconds, so this only keeps a workflow from holding its KV in the engine longer than a call would.
 */
export const MAX_WAKE_HOLD_MS = 10 * 60_000;

/** The outcome of a move up as far as free room takes the context (the agents' names, agent-memory.ts). */
export function prefetchOutcomeOf({ from, to }: Pick<MoveReport, 'from' | 'to'>): PrefetchOutcome {
  if (from === 'device') return 'resident';
  if (to === 'device') return 'resumed';
  if (from === 'disk' && to === 'host') return 'filled-host';
  return from === 'host' ? 'stopped-host' : 'stopped-disk';
}
