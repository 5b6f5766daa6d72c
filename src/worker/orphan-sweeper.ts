// Deletes segment files that no manifest names: a worker killed between writing a segment and its
// manifest leaves one behind, and no release will ever name it. Runs at start and then every interval;
// only files older than minAgeMs go, since a younger one may belong to a spill still under way (a spill
// slower than half of that age re-checks its own files before writing its manifest: TieredMemory).
import type { TieredMemory } from '../tiers/tiered-memory';

export interface OrphanSweeper {
  /** Resolves when the sweep in progress, if any, has finished; no sweep starts afterwards. */
  stop(): Promise<void>;
}

export function startOrphanSweeper(
  tiers: TieredMemory,
  options: { intervalMs: number; minAgeMs: number; log: (message: string, meta: Record<string, unknown>) => void },
): OrphanSweeper {
  let stopped = false;
  let running: Promise<void> = Promise.resolve();
  const sweep = () => {
    running = running.then(async () => {
      if (stopped) return;
      try {
        const deleted = await tiers.sweepOrphanSegments(options.minAgeMs);
        if (deleted > 0) options.log('orphan segment files deleted', { deleted });
      } catch (err) {
        // A manifest this worker cannot read (another key ring, damage) stops the sweep: its segments
        // cannot be told from garbage. Retried at the next interval.
        options.log('orphan sweep failed', { error: String(err) });
      }
    });
  };
  sweep();
  const timer = options.intervalMs > 0 ? setInterval(sweep, options.intervalMs) : undefined;
  timer?.unref();
  return {
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      await running;
    },
  };
}
