// The test suite's projects, by what a test needs to run: `unit` needs only the built addon (no server, no
// model, no browser) and is the loop to run after every change (`npm run test:unit`, under 2 minutes on two
// cores); the others need what `npm test`'s pretest installs. A test file belongs to the first project
// whose list names it and to `unit` when none does, so a new test that starts a dev server or loads the
// model is listed here, which test/architecture/test-projects.test.ts checks. Times: docs/testing.md.

/** One vitest project: its name (`vitest run --project <name>`), the files it runs, and what it needs. */
export interface TestProject {
  readonly name: string;
  readonly needs: string;
  /**
   * Files run at once: 2 where a file mostly waits (on a server, a timer, a lease) or the tests are CPU-bound
   * but timing-free; 1 where a test's timing or a model's threads would feel a neighbour.
   */
  readonly workers: 1 | 2;
  readonly include: readonly string[];
  readonly exclude: readonly string[];
}

const ALL_TESTS = 'test/**/*.test.ts';

/** The projects other than `unit`, each naming its files. */
const NEEDING: readonly Omit<TestProject, 'exclude'>[] = [
  {
    name: 'ui',
    needs: 'a dev server and Debian chromium',
    workers: 1,
    include: ['test/ui/**/*.test.ts'],
  },
  {
    name: 'package',
    needs: 'npm pack, a newcomer project installed from the tarball, a dev server',
    workers: 1,
    include: ['test/package/**/*.test.ts'],
  },
  {
    name: 's3',
    needs: 'a real S3 server (SeaweedFS, built by npm run setup:tests) that tests start and stop',
    workers: 2,
    include: [
      'test/blob-store/s3-blob-store.test.ts',
      'test/blob-store/fence-race.test.ts',
      'test/shared-directory/records-on-s3.test.ts',
      'test/security/attacks/records-bucket.test.ts',
      'test/tiers/cold-tier-s3.test.ts',
      'test/tiers/manifest-log-s3.test.ts',
      'test/plugin/worker-memory-s3.test.ts',
      'test/security/attacks/cold-tier-bucket-swap.test.ts',
      'test/security/attacks/cold-tier-manifest-log.test.ts',
      'test/security/attacks/cold-tier-late-write.test.ts',
      'test/temporal/s3-workers.test.ts',
      'test/faults/s3-outage.test.ts',
      'test/prefix-sharing/cold-prefixes-s3.test.ts',
    ],
  },
  {
    name: 'faults',
    needs: 'dev servers and worker processes that are killed, paused and restarted; the 12-agent load run',
    workers: 1,
    include: ['test/faults/**/*.test.ts'],
  },
  {
    name: 'model',
    needs: 'the real model (SmolLM2-135M through llama.cpp), some on a dev server',
    workers: 1,
    include: [
      'test/engines/batch-invariance.test.ts',
      'test/engines/context-length.test.ts',
      'test/engines/engine-complete.test.ts',
      'test/engines/hot-sequences.test.ts',
      'test/engines/llama-engine.test.ts',
      'test/engines/model-file-errors.test.ts',
      'test/engines/sequence-state.test.ts',
      'test/agent-memory/engine-resume.test.ts',
      'test/ai-sdk/carried-reply-ids.test.ts',
      'test/ai-sdk/example.test.ts',
      'test/ai-sdk/failover.test.ts',
      'test/ai-sdk/streaming.test.ts',
      'test/ai-sdk/tool-loop.test.ts',
      'test/cli/model-command.test.ts',
      'test/security/attacks/ai-sdk-*.test.ts',
      'test/security/attacks/model-turn-paths.test.ts',
      'test/security/attacks/prefix-sharing-isolation.test.ts',
      'test/security/attacks/prefix-sharing-prefill-wait.test.ts',
      'test/prefix-sharing/prefix-sharing-model.test.ts',
      'test/prefix-sharing/ai-sdk-sharing.test.ts',
      'test/prefix-sharing/cross-worker-sharing.test.ts',
      'test/temporal/handover.test.ts',
      'test/temporal/real-agents.test.ts',
      'test/temporal/wake-real-model.test.ts',
    ],
  },
  {
    name: 'temporal',
    needs: "a Temporal dev server or Temporal's time-skipping test server, with worker processes",
    workers: 2,
    include: [
      'test/temporal/**/*.test.ts',
      'test/engines/registered-engine.test.ts',
      'test/plugin/holder-calls.test.ts',
      'test/plugin/long-turn-warning.test.ts',
      'test/plugin/quiet-holder-worker.test.ts',
      'test/plugin/sigterm-drain.test.ts',
      'test/plugin/user-worker.test.ts',
      'test/worker/npx-drain.test.ts',
      'test/worker/worker-process.test.ts',
      'test/workflows/agent-workflow.test.ts',
      'test/workflows/time-skipping.test.ts',
      'test/workflows/wake-ups.test.ts',
      'test/client/codec-key-mismatch.test.ts',
      'test/client/error-causes.test.ts',
      'test/client/retried-calls.test.ts',
      'test/client/search-attribute-setup.test.ts',
      'test/client/temporal-settings.test.ts',
      'test/cli/cli-process.test.ts',
      'test/cli/wake-cli.test.ts',
      'test/cli/codec-server.test.ts',
      'test/dev-server/dev-server-start.test.ts',
      'test/security/temporal-security.test.ts',
      'test/security/attacks/cli-capability-argument.test.ts',
      'test/security/attacks/codec-plaintext-inbound.test.ts',
      'test/security/attacks/holder-left-forgery.test.ts',
      'test/security/attacks/worker-lease-forgery.test.ts',
      'test/security/attacks/rollback.test.ts',
    ],
  },
];

/** Every project; each file runs in exactly one (the `unit` project excludes all the others' files). */
export const TEST_PROJECTS: readonly TestProject[] = [
  { name: 'unit', needs: 'the built addon only', workers: 2, include: [ALL_TESTS], exclude: NEEDING.flatMap((project) => project.include) },
  ...NEEDING.map((project, i) => ({ ...project, exclude: NEEDING.slice(0, i).flatMap((earlier) => earlier.include) })),
];
