// What a workflow learns of a context after each call: where it is and how big, never its bytes.
import type { Tier } from '../fabric/tier';

export interface ContextSnapshot {
  tier: Tier;
  tokens: number;
  blocks: number;
  /** Blocks shared with forks (copy-on-write). */
  sharedBlocks: number;
  pinned: boolean;
}
