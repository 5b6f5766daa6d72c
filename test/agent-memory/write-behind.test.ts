// The write-behind queue of one worker: a context's jobs run one after another, in the order they were
// scheduled; a paused job waits for its pause unless something waits for the context (settled, or the
// drain's allSettled), which starts it at once; a failed job is reported, never thrown at a later caller.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { WriteBehind } from '../../src/agent-memory/write-behind';

const LONG_PAUSE_MS = 60_000;

function recorder() {
  const ran: string[] = [];
  const errors: Array<[string, unknown]> = [];
  const queue = new WriteBehind((contextId, err) => errors.push([contextId, err]));
  const job = (name: string) => async () => {
    ran.push(name);
  };
  return { ran, errors, queue, job };
}

describe('WriteBehind', () => {
  it('leaves a paused job waiting until its pause has passed', async () => {
    const { ran, queue, job } = recorder();
    queue.afterPause('a', 50, job('copy'));
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(ran).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(ran).toEqual(['copy']);
  });

  it('starts a paused job at once when a call waits for its context, and only for that context', async () => {
    const { ran, queue, job } = recorder();
    queue.afterPause('a', LONG_PAUSE_MS, job('a-copy'));
    queue.afterPause('b', LONG_PAUSE_MS, job('b-copy'));
    const started = performance.now();
    await queue.settled('a');
    expect(performance.now() - started).toBeLessThan(LONG_PAUSE_MS / 2);
    expect(ran).toEqual(['a-copy']);
    await queue.allSettled();
    expect(ran).toEqual(['a-copy', 'b-copy']);
  });

  it('reports a paused job that fails to onError and keeps the queue going', async () => {
    const { ran, errors, queue, job } = recorder();
    queue.afterPause('a', LONG_PAUSE_MS, async () => {
      throw new Error('disk gone');
    });
    queue.after('a', job('next'));
    await expect(queue.settled('a')).resolves.toBeUndefined();
    expect(ran).toEqual(['next']);
    expect(errors.map(([contextId, err]) => [contextId, (err as Error).message])).toEqual([['a', 'disk gone']]);
  });

  it('runs every job of a context in the order scheduled, all of them before settled resolves', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ context: fc.constantFrom('a', 'b'), pauseMs: fc.option(fc.integer({ min: 0, max: 5 })) }), {
          maxLength: 12,
        }),
        fc.constantFrom('a', 'b'),
        async (jobs, waitedFor) => {
          const { ran, queue, job } = recorder();
          jobs.forEach(({ context, pauseMs }, i) => {
            const name = `${context}${i}`;
            if (pauseMs === null) queue.after(context, job(name));
            else queue.afterPause(context, pauseMs === 0 ? LONG_PAUSE_MS : pauseMs, job(name));
          });
          await queue.settled(waitedFor);
          const scheduled = (context: string) => jobs.flatMap((j, i) => (j.context === context ? [`${context}${i}`] : []));
          expect(ran.filter((name) => name.startsWith(waitedFor))).toEqual(scheduled(waitedFor));
          await queue.allSettled();
          expect(ran.filter((name) => name.startsWith('a'))).toEqual(scheduled('a'));
          expect(ran.filter((name) => name.startsWith('b'))).toEqual(scheduled('b'));
        },
      ),
      { numRuns: 50 },
    );
  });
});
