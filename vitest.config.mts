import { defineConfig } from 'vitest/config';

import { loadNativeBinding } from './src/fabric/native-binding';
import { TEST_PROJECTS } from './test/projects';

// KVFABRIC_BACKEND=cuda runs the same suites on the CUDA backend. Where no CUDA device is usable (and
// no stand-in driver is configured through KVFABRIC_LIBCUDA), every test is skipped with the reason,
// instead of each one failing with UNAVAILABLE.
function cudaSkipReason(): string | undefined {
  if (process.env.KVFABRIC_BACKEND !== 'cuda') return undefined;
  try {
    const probe = loadNativeBinding().cudaProbe(0);
    return probe.usable ? undefined : probe.reason;
  } catch (err) {
    return `the addon could not be loaded (${(err as Error).message})`;
  }
}

const skip = cudaSkipReason();
if (skip) console.warn(`\nkvfabric: KVFABRIC_BACKEND=cuda but no usable CUDA device, so every test is skipped: ${skip}\n`);

export default defineConfig({
  test: {
    // Forked processes, not threads: worker threads break Temporal's native bridge and addons.
    pool: 'forks',
    passWithNoTests: Boolean(skip),
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // One project per thing a test needs (test/projects.ts): `vitest run --project unit` is the fast loop,
    // `vitest run` (npm test) runs them all.
    // Vitest runs the projects of one worker count together, as a group; the group of two runs first.
    projects: TEST_PROJECTS.map(({ name, include, exclude, workers }) => ({
      extends: true,
      test: {
        name,
        include: skip ? [] : include,
        exclude: [...exclude, '**/node_modules/**'],
        maxWorkers: workers,
        sequence: { groupOrder: workers === 2 ? 0 : 1 },
      },
    })),
  },
});
