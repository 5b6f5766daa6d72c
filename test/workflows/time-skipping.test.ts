// The time-skipping test environment works here, offline: Temporal's Java test server from set-up runs a
// workflow's one-day timer in seconds of wall time, and the server's clock moves the whole day.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { isFabricError } from '../../src/fabric/errors';
import { createTimeSkippingEnv } from '../support/time-skipping';
import type { sleepOneDay } from './fixtures/sleepy-workflow';

const DAY_MS = 24 * 60 * 60 * 1000;

describe('time-skipping test environment', () => {
  let env: TestWorkflowEnvironment;

  beforeAll(async () => {
    Runtime.install({ logger: new DefaultLogger('WARN') });
    env = await createTimeSkippingEnv();
  });

  afterAll(async () => {
    await env?.teardown();
  });

  it('runs a one-day timer in seconds, and the server clock moves a day', async () => {
    const taskQueue = `time-skipping-${randomBytes(4).toString('hex')}`;
    const worker = await Worker.create({
      connection: env.nativeConnection,
      taskQueue,
      workflowsPath: join(__dirname, 'fixtures', 'sleepy-workflow.ts'),
    });
    const serverStartedMs = await env.currentTimeMs();
    const wallStartedMs = Date.now();
    const result = await worker.runUntil(
      env.client.workflow.execute<typeof sleepOneDay>('sleepOneDay', { taskQueue, workflowId: `sleepy-${randomBytes(4).toString('hex')}` }),
    );
    const wallMs = Date.now() - wallStartedMs;

    expect(result.wokeMs - result.startedMs).toBeGreaterThanOrEqual(DAY_MS);
    expect((await env.currentTimeMs()) - serverStartedMs).toBeGreaterThanOrEqual(DAY_MS);
    expect(wallMs).toBeLessThan(30_000);
  });

  it('refuses to start without the installed server, naming the set-up command', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'kvfabric-no-test-server-'));
    try {
      const failure = await createTimeSkippingEnv({}, { ...process.env, KVFABRIC_TEST_SERVER_DIR: empty }).catch((err: unknown) => err);
      expect(isFabricError(failure, 'UNAVAILABLE')).toBe(true);
      expect((failure as Error).message).toContain('npm run setup:test-server');
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});
