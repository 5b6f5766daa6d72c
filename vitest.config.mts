import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // Forked processes, not threads: worker threads break Temporal's native bridge and addons.
    pool: 'forks',
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
