// The holder's call queue (src/plugin/holder-calls.ts). Its semaphore runs at most `size` calls at once,
// in arrival order, and every call settles and frees its slot, failed or not (property-based). On a real
// dev server, a worker whose only running slot stays busy past the calls' schedule-to-start and heartbeat
// timeouts still serves the next call, which waits heartbeating; the same worker without the queue leaves
// that call to time out unserved: what the agent workflow would take for a lost holder (a false failover).
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { Context } from '@temporalio/activity';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { CallSlots, HOLDER_CALLS_TAKEN, queuedCalls } from '../../src/plugin/holder-calls';
import { HEARTBEAT_THROTTLE_MS } from '../../src/plugin/liveness';
import { installRuntime } from '../temporal/harness';
import type { BusyHolderCalls, BusyHolderTimeouts, busyHolder } from './fixtures/busy-holder-workflow';

const nextTick = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('CallSlots', () => {
  it('runs at most `size` calls at once, starts them in arrival order, and frees every slot, failed or not', async () => {
    const call = fc.record({ ticks: fc.integer({ min: 0, max: 4 }), fails: fc.boolean(), releasesTwice: fc.boolean() });
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 4 }), fc.array(call, { minLength: 1, maxLength: 24 }), async (size, calls) => {
        const slots = new CallSlots(size);
        let running = 0;
        let most = 0;
        const started: number[] = [];
        const outcomes = await Promise.allSettled(
          calls.map(async ({ ticks, fails, releasesTwice }, i) => {
            const release = await slots.take();
            running++;
            most = Math.max(most, running);
            started.push(i);
            try {
              for (let t = 0; t < ticks; t++) await nextTick();
              if (fails) throw new Error(`call ${i} failed`);
              return i;
            } finally {
              running--;
              release();
              if (releasesTwice) release(); // a second release must not make a slot out of nothing
            }
          }),
        );
        expect(most).toBeLessThanOrEqual(size);
        expect(started).toEqual(calls.map((_, i) => i));
        expect(outcomes.map((o) => o.status)).toEqual(calls.map((c) => (c.fails ? 'rejected' : 'fulfilled')));
        expect(slots.queued).toBe(0);
        // Every slot is free again, and no more than that: `size` takes resolve at once, the next one waits.
        const held = await Promise.all(Array.from({ length: size }, () => slots.take()));
        let extra = false;
        const more = slots.take().then((release) => ((extra = true), release));
        await nextTick();
        expect(extra).toBe(false);
        held[0]!();
        (await more)();
        for (const release of held.slice(1)) release();
      }),
      { numRuns: 200 },
    );
  });

  it('runs `size` calls at once when they all wait', async () => {
    const slots = new CallSlots(3);
    let running = 0;
    let most = 0;
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const calls = Array.from({ length: 7 }, async () => {
      const release = await slots.take();
      most = Math.max(most, ++running);
      await gate;
      running--;
      release();
    });
    await nextTick();
    expect([most, slots.queued]).toEqual([3, 4]);
    open();
    await Promise.all(calls);
    expect(most).toBe(3);
  });

  it('refuses a size below one', () => {
    expect(() => new CallSlots(0)).toThrow(RangeError);
  });
});

describe('a busy holder on a real dev server', () => {
  let server: DevServer;
  let connection: Connection;
  let client: Client;
  let workerConnection: NativeConnection;
  let bundle: WorkflowBundleWithSourceMap;

  beforeAll(async () => {
    await installRuntime();
    server = await startDevServer();
    connection = await Connection.connect({ address: server.address });
    client = new Client({ connection });
    workerConnection = await NativeConnection.connect({ address: server.address });
    bundle = await bundleWorkflowCode({
      workflowsPath: join(__dirname, 'fixtures', 'busy-holder-workflow.ts'),
      logger: { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} },
    });
  }, 120_000);

  afterAll(async () => {
    await workerConnection?.close();
    await connection?.close();
    await server?.stop();
  });

  const calls: BusyHolderCalls = {
    async long(ms) {
      const started = Date.now();
      while (Date.now() - started < ms) {
        Context.current().heartbeat();
        await sleep(250);
      }
      return { started, ended: Date.now() };
    },
    async short() {
      const now = Date.now();
      return { started: now, ended: now };
    },
  };

  /** One worker with one running slot serving the busy-holder workflow; its two calls' outcomes. */
  async function callBusyHolder(activities: BusyHolderCalls, slotsTaken: number) {
    const taskQueue = `busy-${randomBytes(3).toString('hex')}`;
    const timeouts: BusyHolderTimeouts = { taskQueue, scheduleToStartMs: 2000, heartbeatMs: 5000, longMs: 8000 };
    const worker = await Worker.create({
      connection: workerConnection,
      taskQueue,
      workflowBundle: bundle,
      activities,
      maxConcurrentActivityTaskExecutions: slotsTaken,
      maxHeartbeatThrottleInterval: HEARTBEAT_THROTTLE_MS,
    });
    return worker.runUntil(
      client.workflow.execute<typeof busyHolder>('busyHolder', { taskQueue, workflowId: taskQueue, args: [timeouts] }),
    );
  }

  it('serves a call that waited behind the busy slot past its schedule-to-start and heartbeat timeouts', async () => {
    const [long, short] = await callBusyHolder(queuedCalls(calls, 1), HOLDER_CALLS_TAKEN);
    expect(long).toMatchObject({ started: expect.any(Number) });
    expect(short).toMatchObject({ started: expect.any(Number) });
    // It ran once the long call had freed the slot: it waited there, heartbeating, about 7 s.
    expect((short as { started: number }).started).toBeGreaterThanOrEqual((long as { ended: number }).ended);
  }, 60_000);

  it("without the queue, the same call times out unserved (schedule-to-start), as a lost holder's would", async () => {
    const [long, short] = await callBusyHolder(calls, 1);
    expect(long).toMatchObject({ started: expect.any(Number) });
    expect(short).toBe('TimeoutFailure: SCHEDULE_TO_START');
  }, 60_000);
});
