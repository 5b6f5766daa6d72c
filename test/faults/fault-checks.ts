// What every fault test checks afterwards besides the bytes (harness.ts's expectedDigest): the baseline (no
// context, no used block in any pool, no file left in the cold tier, no grant left).
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

import type { GpuWorker } from '../../src/worker/gpu-worker';

/** Every file under `directory` (recursively), relative to it. */
export function filesUnder(directory: string): string[] {
  const found: string[] = [];
  const walk = (dir: string, prefix: string): void => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const name of names) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path, `${prefix}${name}/`);
      else found.push(`${prefix}${name}`);
    }
  };
  walk(directory, '');
  return found;
}

/** Files that hold contexts or their grants (epoch records and the denial audit are kept on purpose). */
export function contextFiles(tierDir: string): string[] {
  return [...filesUnder(join(tierDir, 'cold')).map((f) => `cold/${f}`), ...filesUnder(join(tierDir, 'grants')).map((f) => `grants/${f}`)];
}

/** A worker's pools at baseline: no context, no used block on the device, in host memory or on disk. */
export function poolBaseline(worker: GpuWorker): {
  contexts: number;
  usedBlocks: number;
  hostUsed: number;
  diskOnlyBlocks: number;
  liveSegments: number;
} {
  const stats = worker.memory.stats();
  return {
    contexts: stats.contexts,
    usedBlocks: stats.usedBlocks,
    hostUsed: stats.host.usedBlocks,
    diskOnlyBlocks: stats.diskOnlyBlocks,
    liveSegments: stats.disk.liveSegments,
  };
}

export const BASELINE = { contexts: 0, usedBlocks: 0, hostUsed: 0, diskOnlyBlocks: 0, liveSegments: 0 };
