// What a workflow learns of a context after each call: where it is and how big, never its bytes.
import type { Tier } from '../fabric/tier';

export interface ContextSnapshot {
  tier: Tier;
  tokens: number;
  blocks: number;
  /** Blocks shared with forks (copy-on-write). */
  sharedBlocks: number;
  pinned: boolean;
  /**
   * The version of the newest durable copy (manifest) this worker wrote or adopted; 0 when none. The
   * workflow keeps the highest it saw and passes it to a failover's recover, so a manifest put back from
   * an older version (a rollback) is refused before any of its bytes are used.
   */
  durableVersion: number;
}
