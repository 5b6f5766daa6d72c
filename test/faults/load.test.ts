// The short CI version of `npm run load`: 12 agents at once on one dev server and two worker processes,
// with forks; every restored byte matches and both pools and the tier directory end at baseline.
import { expect, it } from 'vitest';

import { runLoad } from '../../scripts/load';

it('12 agents at once on two worker processes: all finish byte-exact, nothing leaks', async () => {
  const report = await runLoad({ agents: 12, turns: 2, tokens: 20, forkEvery: 4 });
  console.log(`[load] ${JSON.stringify(report)}`);
  expect(report).toMatchObject({ agents: 12, forks: 3, verifiedResumes: 12, digestMismatches: 0, drainedContexts: [0, 0] });
  expect(report.leftFiles).toEqual([]);
}, 120_000);
