// Holder fences in the shared directory: the latest claim (failover, then attempt) holds the context,
// whatever claims run at once and in which processes. A late claim that read an older fence must not
// write over a later one: the frozen worker's timed-out adoption would take the context back.
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { HolderFences } from '../../src/shared-directory/holder-fences';
import { Racers } from './fixtures/racers';
import { posixStore, testRecordSeal } from './fixtures/test-records';

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'kvfabric-fences-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('holder fences', () => {
  it('lets a later claim win, refuses an earlier one with STALE_HANDLE naming the holder, and changes nothing then', async () => {
    const dir = join(root, 'basic');
    const [a, b] = [
      await HolderFences.open(await posixStore(dir), '', 'worker-a', testRecordSeal()),
      await HolderFences.open(await posixStore(dir), '', 'worker-b', testRecordSeal()),
    ];
    expect(await a.stillHolder('planner')).toBe(true); // never adopted: no fence
    await a.claim('planner', 1, 1);
    await a.claim('planner', 1, 1); // a retry of the same claim
    expect([await a.stillHolder('planner'), await b.stillHolder('planner')]).toEqual([true, false]);
    await b.claim('planner', 1, 2);
    expect([await a.stillHolder('planner'), await b.stillHolder('planner')]).toEqual([false, true]);
    const entries = readdirSync(join(dir, readdirSync(dir)[0]!));
    await expect(a.claim('planner', 1, 1)).rejects.toMatchObject({
      code: 'STALE_HANDLE',
      message: expect.stringContaining('worker-b (failover 1, attempt 2)'),
    });
    expect(readdirSync(join(dir, readdirSync(dir)[0]!))).toEqual(entries); // the refused claim wrote nothing
    await a.claim('planner', 2, 1);
    expect([await a.stillHolder('planner'), await b.stillHolder('planner')]).toEqual([true, false]);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
  });

  it('refuses counts that are not positive integers with INVALID_ARGUMENT', async () => {
    const fences = await HolderFences.open(await posixStore(join(root, 'bad')), '', 'worker-a', testRecordSeal());
    for (const [epoch, attempt] of [
      [0, 1],
      [1, 0],
      [1.5, 1],
      [1, Number.NaN],
    ] as const) {
      await expect(fences.claim('planner', epoch, attempt)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    expect(await fences.stillHolder('planner')).toBe(true);
  });

  it('after any interleaving of claims by several workers, the holder is the one of the latest claim', async () => {
    const dir = join(root, 'property');
    const holders = ['worker-a', 'worker-b', 'worker-c'];
    const fences = await Promise.all(holders.map(async (holder) => HolderFences.open(await posixStore(dir), '', holder, testRecordSeal())));
    let trial = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.tuple(fc.nat({ max: 2 }), fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 4 })), {
          minLength: 1,
          maxLength: 6,
          selector: ([, epoch, attempt]) => `${epoch}.${attempt}`, // one worker per (failover, attempt), as in Temporal
        }),
        fc.scheduler(),
        async (claims, s) => {
          const contextId = `ctx-${trial++}`;
          const outcomes = claims.map(([who, epoch, attempt]) =>
            s.schedule(Promise.resolve(), `claim ${holders[who]} ${epoch}.${attempt}`).then(() =>
              fences[who]!.claim(contextId, epoch, attempt).then(
                () => 'ok',
                (err: { code?: string }) => err.code,
              ),
            ),
          );
          await s.waitAll();
          const results = await Promise.all(outcomes);
          expect(results.every((result) => result === 'ok' || result === 'STALE_HANDLE')).toBe(true);
          const latest = claims.reduce((a, b) => (b[1] > a[1] || (b[1] === a[1] && b[2] > a[2]) ? b : a));
          expect(results[claims.indexOf(latest)]).toBe('ok'); // the latest claim is never refused
          for (const [who] of holders.entries()) expect(await fences[who]!.stillHolder(contextId)).toBe(who === latest[0]);
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('holder fences across processes', () => {
  let racers: Racers;
  beforeAll(async () => {
    racers = await Racers.start(2);
  });
  afterAll(() => racers?.stop());

  it("a late attempt's claim racing the later failover's never takes the context back, in every one of 150 trials", async () => {
    const dir = join(root, 'processes');
    const [frozen, adopter] = [
      await HolderFences.open(await posixStore(dir), '', 'worker-frozen', testRecordSeal()),
      await HolderFences.open(await posixStore(dir), '', 'worker-new', testRecordSeal()),
    ];
    const lost: number[] = [];
    for (let trial = 0; trial < 150; trial++) {
      const contextId = `ctx-${trial}`;
      const orders = [
        { op: 'claim' as const, dir, holder: 'worker-frozen', contextId, epoch: 1, attempt: 3 },
        { op: 'claim' as const, dir, holder: 'worker-new', contextId, epoch: 2, attempt: 1 },
      ];
      const results = await racers.race(trial % 2 === 0 ? orders : orders.reverse());
      expect(results.every((result) => result.ok || result.code === 'STALE_HANDLE')).toBe(true);
      if (!(await adopter.stillHolder(contextId)) || (await frozen.stillHolder(contextId))) lost.push(trial);
    }
    expect(lost).toEqual([]);
  });
});
