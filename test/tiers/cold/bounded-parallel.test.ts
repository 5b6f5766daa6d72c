// The cold tier's limiter: at most `slots` holders, waiters served in order, and a slot taken by
// acquire() held until its release, which counts once (hand over hand between two limiters).
import { describe, expect, it } from 'vitest';

import { forEachBounded, Limiter } from '../../../src/tiers/cold/bounded-parallel';

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('Limiter', () => {
  it('holds a slot from acquire to its release, serves waiters in order, and counts a second release as none', async () => {
    const limiter = new Limiter(2);
    const first = await limiter.acquire();
    const second = await limiter.acquire();
    const order: number[] = [];
    const third = limiter.acquire().then((release) => (order.push(3), release));
    const fourth = limiter.acquire().then((release) => (order.push(4), release));
    await tick();
    expect(order).toEqual([]);
    first();
    first(); // already given back: frees nothing more
    await tick();
    expect(order).toEqual([3]);
    second();
    await tick();
    expect(order).toEqual([3, 4]);
    (await third)();
    (await fourth)();
    // Both slots free again: two acquire at once.
    await Promise.all([limiter.acquire(), limiter.acquire()]);
  });

  it('passes a task hand over hand: it takes the next slot before giving the first back', async () => {
    const reads = new Limiter(1);
    const decrypts = new Limiter(1);
    let reading = 0;
    let most = 0;
    await forEachBounded([1, 2, 3, 4], new Limiter(Number.POSITIVE_INFINITY), async () => {
      const releaseRead = await reads.acquire();
      most = Math.max(most, ++reading);
      await tick();
      reading--;
      const releaseDecrypt = await decrypts.acquire();
      releaseRead();
      await tick();
      releaseDecrypt();
    });
    expect(most).toBe(1);
  });
});
