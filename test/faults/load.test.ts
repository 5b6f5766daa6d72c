// The short CI version of `npm run load`: 12 agents at once on one dev server and two worker processes,
// with forks; every restored byte matches and both pools and the tier directory end at baseline, and it
// reports progress while it runs.
import { expect, it } from 'vitest';

import { runLoad } from '../../scripts/load';

it('12 agents at once on two worker processes: all finish byte-exact, nothing leaks', async () => {
  const lines: string[] = [];
  const report = await runLoad({ agents: 12, turns: 2, tokens: 20, forkEvery: 4, log: (line) => lines.push(line), progressEveryMs: 500 });
  console.log(`[load] ${JSON.stringify(report)}`);
  expect(report).toMatchObject({ agents: 12, forks: 3, turns: 39, verifiedResumes: 12, digestMismatches: 0, drainedContexts: [0, 0] });
  // Progress while it ran, counting toward every turn it then took (12 x (2 + 1) + 3 forks' turns).
  expect(lines.filter((line) => /^progress: \d+\/12 agents started, \d+\/39 turns done, \d+ s$/.test(line)).length).toBeGreaterThan(0);
  expect(report.leftFiles).toEqual([]);
}, 120_000);
