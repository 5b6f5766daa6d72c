// Revocation epochs in the shared directory: a raise never lowers the record, whatever raises run at once
// and in which processes. The lost update this guards against: two raisers both read the old record, and
// the lower one's write lands last (seen: 1000 left after raises to 2000 and 1000, in 81 of 200 trials).
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { EpochStore } from '../../src/shared-directory/epochs';
import { Racers } from './fixtures/racers';
import { posixStore, testRecordSeal } from './fixtures/test-records';

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'kvfabric-epochs-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** The one folder a context's epoch entries are in (its name is a hash of the context id). */
function entriesOf(dir: string): string[] {
  const folders = readdirSync(dir);
  expect(folders).toHaveLength(1);
  return readdirSync(join(dir, folders[0]!));
}

describe('epoch store', () => {
  it('starts at 0, rises, never falls, and keeps one entry', async () => {
    const dir = join(root, 'basic');
    const epochs = await EpochStore.open(await posixStore(dir), '', testRecordSeal());
    expect(await epochs.minimum('planner')).toBe(0);
    await epochs.raise('planner', 5);
    await epochs.raise('planner', 3);
    expect(await epochs.minimum('planner')).toBe(5);
    await epochs.raise('planner', 2 ** 53); // a release of a token at epoch 2^53 - 1
    expect(await epochs.minimum('planner')).toBe(2 ** 53);
    expect(await (await EpochStore.open(await posixStore(dir), '', testRecordSeal())).minimum('planner')).toBe(2 ** 53); // another worker sees it
    expect(entriesOf(dir)).toEqual([String(2 ** 53)]); // lower entries pruned
    expect(await epochs.minimum('critic')).toBe(0); // per context
  });

  it('refuses an epoch that is no integer in [0, 2^53] with INVALID_ARGUMENT and changes nothing', async () => {
    const dir = join(root, 'bad-values');
    const epochs = await EpochStore.open(await posixStore(dir), '', testRecordSeal());
    await epochs.raise('planner', 7);
    for (const bad of [-1, 1.5, Number.NaN, Infinity, 2 ** 53 + 2, '9' as unknown as number]) {
      await expect(epochs.raise('planner', bad)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    expect(await epochs.minimum('planner')).toBe(7);
    expect(entriesOf(dir)).toEqual(['7']);
  });

  it('fails closed (INTEGRITY) on an entry no raise made, and ignores dot files (NFS silly renames)', async () => {
    const dir = join(root, 'foreign');
    const epochs = await EpochStore.open(await posixStore(dir), '', testRecordSeal());
    await epochs.raise('planner', 9);
    const folder = join(dir, readdirSync(dir)[0]!);
    writeFileSync(join(folder, '.nfs0000000000001234'), '');
    expect(await epochs.minimum('planner')).toBe(9);
    writeFileSync(join(folder, '0009'), ''); // a number, but not as a raise writes it
    await expect(epochs.minimum('planner')).rejects.toMatchObject({ code: 'INTEGRITY' });
    rmSync(join(folder, '0009'));
    expect(await epochs.minimum('planner')).toBe(9);
  });

  it('keeps every folder and file to its owner: 0700 and 0600', async () => {
    const dir = join(root, 'modes');
    const epochs = await EpochStore.open(await posixStore(dir), '', testRecordSeal());
    await epochs.raise('planner', 11);
    const folder = join(dir, readdirSync(dir)[0]!);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(folder).mode & 0o777).toBe(0o700);
    expect(statSync(join(folder, '11')).mode & 0o777).toBe(0o600);
  });

  it('after any interleaving of raises by several workers, the record is the greatest epoch raised', async () => {
    const dir = join(root, 'property');
    // Several stores on one directory: several workers, each with its own view of it.
    const stores = await Promise.all([1, 2, 3].map(async () => EpochStore.open(await posixStore(dir), '', testRecordSeal())));
    let trial = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.nat({ max: 2 }), fc.integer({ min: 0, max: 2 ** 53 })), { minLength: 1, maxLength: 8 }),
        fc.scheduler(),
        async (raises, s) => {
          const contextId = `ctx-${trial++}`;
          // The scheduler decides when each raise starts relative to the others' steps; the steps
          // themselves are real file-system calls that overlap in libuv's thread pool.
          const running = raises.map(([store, epoch]) =>
            s.schedule(Promise.resolve(), `raise ${epoch}`).then(() => stores[store]!.raise(contextId, epoch)),
          );
          await s.waitAll();
          await Promise.all(running);
          const highest = Math.max(...raises.map(([, epoch]) => epoch));
          for (const store of stores) expect(await store.minimum(contextId)).toBe(highest);
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('epoch store across processes', () => {
  let racers: Racers;
  beforeAll(async () => {
    racers = await Racers.start(3);
  });
  afterAll(() => racers?.stop());

  it('two processes raising 2000 and 1000 at one instant leave 2000, in every one of 200 trials', async () => {
    const dir = join(root, 'two-processes');
    const epochs = await EpochStore.open(await posixStore(dir), '', testRecordSeal());
    const lost: number[] = [];
    for (let trial = 0; trial < 200; trial++) {
      const contextId = `ctx-${trial}`;
      // Which process raises which epoch alternates, so neither process's start-up order decides it.
      const values = trial % 2 === 0 ? [2000, 1000] : [1000, 2000];
      const results = await racers.race(values.map((value) => ({ op: 'raise' as const, dir, contextId, value })));
      expect(results.every((result) => result.ok)).toBe(true);
      if ((await epochs.minimum(contextId)) !== 2000) lost.push(trial);
    }
    expect(lost).toEqual([]);
  });

  it('three processes raising random epochs at one instant leave the greatest, in every one of 100 trials', async () => {
    const dir = join(root, 'three-processes');
    const epochs = await EpochStore.open(await posixStore(dir), '', testRecordSeal());
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: 1, max: 2 ** 53 }), { minLength: 3, maxLength: 3 }),
        fc.context(),
        async (values, ctx) => {
          const contextId = `ctx-${values.join('-')}`;
          const results = await racers.race(values.map((value) => ({ op: 'raise' as const, dir, contextId, value })));
          ctx.log(JSON.stringify(results));
          expect(results.every((result) => result.ok)).toBe(true);
          expect(await epochs.minimum(contextId)).toBe(Math.max(...values));
        },
      ),
      { numRuns: 100 },
    );
  });
});
