// What a tier move did, told by the move itself: callers never diff statistics or rescan residencies to
// learn it.
import type { Tier } from '../fabric/tier';

/** One context pushed deeper to make room or by background demotion. */
export interface Eviction {
  contextId: string;
  from: Tier;
  to: Tier;
  /** Bytes of the context that changed tier. */
  bytes: number;
}

export interface MoveReport {
  /** Where the context was before the call and where it is after. */
  from: Tier;
  to: Tier;
  /**
   * Bytes of the context that changed tier: left the device (to host), became disk-only (to disk), or
   * arrived on the device (restore).
   */
  bytes: number;
  /** Other contexts this call evicted to make room for it. */
  evictions: Eviction[];
}
