// A GPU worker starts without an alarming line: its worker-specific queue's Worker has activities only by
// design, and the SDK's "No workflows registered, not polling for workflow tasks" warning for it is
// dropped. The same warning from a user's own Worker without workflows is still logged: there it may be
// a mistake. On a real dev server, with the runtime's logger capturing every line.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { DefaultLogger, NativeConnection, Runtime, Worker, type LogEntry } from '@temporalio/worker';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { NO_WORKFLOWS_WARNING } from '../../src/plugin/activity-only-worker';
import { createGpuWorker } from '../../src/worker/gpu-worker';
import { testWorkerConfig } from '../temporal/harness';

const lines: LogEntry[] = [];
let server: DevServer;
let connection: NativeConnection;
const tierDir = mkdtempSync(join(tmpdir(), 'kvfabric-quiet-'));

beforeAll(async () => {
  Runtime.install({ logger: new DefaultLogger('INFO', (entry) => lines.push(entry)) });
  server = await startDevServer();
  connection = await NativeConnection.connect({ address: server.address });
});
afterAll(async () => {
  await connection?.close();
  await server?.stop();
  rmSync(tierDir, { recursive: true, force: true });
});

/** Runs `worker` until it polls (its "Worker state changed" RUNNING line), then stops it. */
async function runBriefly(run: () => Promise<unknown>, shutdown: () => void, queue: string): Promise<void> {
  const done = run();
  for (let i = 0; i < 200 && !lines.some((l) => l.meta?.taskQueue === queue && /RUNNING/.test(String(l.meta?.state ?? l.message))); i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  shutdown();
  await done;
}

it("drops the no-workflows warning of the GPU worker's own queue, and logs every other line", async () => {
  const taskQueue = `kvfabric-quiet-${randomBytes(3).toString('hex')}`;
  const worker = await createGpuWorker({
    connection,
    config: testWorkerConfig({
      address: server.address,
      taskQueue,
      tierDir,
      workerId: 'quiet',
      pool: { deviceBlocks: 16, hostBlocks: 16 },
      maxConcurrentActivities: 2,
      shutdownGraceMs: 1000,
    }),
  });
  await runBriefly(
    () => worker.run(),
    () => worker.shutdown(),
    worker.holder,
  );
  const holderLines = lines.filter((l) => l.meta?.taskQueue === worker.holder);
  expect(holderLines.length).toBeGreaterThan(0); // its other lines still reach the log
  expect(lines.filter((l) => l.message === NO_WORKFLOWS_WARNING)).toEqual([]);
  expect(lines.some((l) => l.message === 'kvfabric GPU worker ready')).toBe(true);
});

it("still warns for a user's Worker that has no workflows", async () => {
  const taskQueue = `user-${randomBytes(3).toString('hex')}`;
  const worker = await Worker.create({ connection, taskQueue, activities: { noop: async () => undefined } });
  await runBriefly(
    () => worker.run(),
    () => worker.shutdown(),
    taskQueue,
  );
  expect(lines.filter((l) => l.message === NO_WORKFLOWS_WARNING && l.meta?.taskQueue === taskQueue)).toHaveLength(1);
});
