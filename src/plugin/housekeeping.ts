// A GPU worker's periodic chores, at start and then every interval, one at a time:
//  - orphan segments: files no manifest names, left by a worker killed between a segment and its
//    manifest (no release will ever name them); only those older than the minimum age go, since a
//    younger one may belong to a spill still under way (TieredMemory re-checks slow spills);
//  - fenced contexts: copies of contexts another worker adopted while this one was slow (holder-fences);
//  - stale shared prefixes: cold copies of prefixes older than their idle time and a grace, a dead
//    worker's (src/prefix-sharing);
//  - ended AI SDK runs: the KV of AI SDK agents whose workflow run has closed (src/ai-sdk).
import type { AgentMemory } from '../agent-memory/agent-memory';

export interface Housekeeping {
  /** Resolves when the round in progress, if any, has finished; no round starts afterwards. */
  stop(): Promise<void>;
}

export function startHousekeeping(
  memory: AgentMemory,
  options: {
    intervalMs: number;
    orphanMinAgeMs: number;
    log: (message: string, meta: Record<string, unknown>) => void;
    /** Frees the KV of ended AI SDK runs; absent on a worker without a model. */
    releaseEndedRuns?: () => Promise<string[]>;
  },
): Housekeeping {
  let stopped = false;
  let running: Promise<void> = Promise.resolve();
  const chores: Array<[string, () => Promise<void>]> = [
    [
      'orphan sweep',
      async () => {
        const deleted = await memory.sweepOrphanSegments(options.orphanMinAgeMs);
        if (deleted > 0) options.log('orphan segment files deleted', { deleted });
      },
    ],
    [
      'fenced contexts',
      async () => {
        const dropped = await memory.dropFencedContexts();
        if (dropped.length > 0) options.log('dropped contexts another worker adopted while this one was slow', { contexts: dropped });
      },
    ],
    [
      'stale shared prefixes',
      async () => {
        const deleted = await memory.sweepColdPrefixes();
        if (deleted > 0) options.log('stale shared prefixes deleted from the cold tier', { deleted });
      },
    ],
  ];
  const { releaseEndedRuns } = options;
  if (releaseEndedRuns) {
    chores.push([
      'ended AI SDK runs',
      async () => {
        const released = await releaseEndedRuns();
        if (released.length > 0) options.log('freed the KV of AI SDK runs that ended', { contexts: released });
      },
    ]);
  }
  const round = () => {
    running = running.then(async () => {
      for (const [name, chore] of chores) {
        if (stopped) return;
        try {
          await chore();
        } catch (err) {
          // A manifest this worker cannot read (another key ring, damage) stops the orphan sweep: its
          // segments cannot be told from garbage. Every chore is retried at the next round.
          options.log(`${name} failed`, { error: String(err) });
        }
      }
    });
  };
  round();
  const timer = options.intervalMs > 0 ? setInterval(round, options.intervalMs) : undefined;
  timer?.unref();
  return {
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      await running;
    },
  };
}
