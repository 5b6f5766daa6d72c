// The time-skipping test environment (@temporalio/testing's createTimeSkipping) on Temporal's Java test
// server, which set-up installs from Maven Central (scripts/ensure-test-server.ts): the SDK would download
// a native build from temporal.download, out of our machines' reach. Nothing is downloaded here, and a
// missing install fails the test that needs it, never skips it.
import { accessSync, constants } from 'node:fs';

import { TestWorkflowEnvironment, type TimeSkippingTestWorkflowEnvironmentOptions } from '@temporalio/testing';

import { TEST_SERVER_VERSION, testServerLauncher } from '../../scripts/ensure-test-server';
import { FabricError } from '../../src/fabric/errors';

/**
 * A fresh time-skipping environment on its own test server (a JVM on a free port). Time is global to the
 * server, so a test file runs its workflows one after another or creates one environment per test.
 * UNAVAILABLE when the test server is not installed. Call `teardown()` when done: it kills the server.
 */
export async function createTimeSkippingEnv(
  options: Omit<TimeSkippingTestWorkflowEnvironmentOptions, 'server'> = {},
  env: NodeJS.ProcessEnv = process.env,
): Promise<TestWorkflowEnvironment> {
  const launcher = testServerLauncher(env);
  try {
    accessSync(launcher, constants.X_OK);
  } catch {
    throw new FabricError(
      'UNAVAILABLE',
      `Temporal's test server ${TEST_SERVER_VERSION} is not installed (no ${launcher}): run \`npm run setup:test-server\``,
    );
  }
  return TestWorkflowEnvironment.createTimeSkipping({ ...options, server: { executable: { type: 'existing-path', path: launcher } } });
}
