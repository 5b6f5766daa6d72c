// A workflow task that runs a long local activity (an agent's long turn) makes the SDK core warn
// `[TMPRL1104] Workflow task duration exceeded 5 seconds`; with the threshold the kvfabric worker plugin
// sets (task-duration-warning.ts) the same task logs nothing (issue 39). Both runs on a real dev server,
// each in its own process: the core reads the threshold once per process.
import { join } from 'node:path';

import { afterAll, beforeAll, expect, it } from 'vitest';

import { startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { runTsx } from '../cli/run-cli';

const MAIN = join(__dirname, 'fixtures', 'long-task-main.ts');
const TASK_MS = '6000';

let server: DevServer;
beforeAll(async () => {
  server = await startDevServer();
});
afterAll(async () => server?.stop());

it("logs no TMPRL1104 warning for a long turn's workflow task under the plugin's threshold; the SDK's default does", async () => {
  const unset = { TEMPORAL_WORKFLOW_TASK_DURATION_WARN_SECONDS: '' }; // whatever this shell has: the core then uses its own 5 s
  const [quiet, sdkDefault] = await Promise.all([
    runTsx(MAIN, [server.address, TASK_MS, 'quiet'], unset),
    runTsx(MAIN, [server.address, TASK_MS, 'default'], unset),
  ]);
  for (const run of [quiet, sdkDefault]) expect(run.stdout, run.stderr).toContain('long task done');
  expect(sdkDefault.stdout).toContain('[TMPRL1104]');
  expect(quiet.stdout).not.toContain('[TMPRL1104]');
});
