// The records that decide access (grants, tenant ids, epochs, fences) kept in a real S3 bucket
// (SeaweedFS), as workers on separate machines share them: each racer below opens its own store, its own
// client and its own record store, as a worker does. Create-once records have exactly one winner among
// 32 racers, and every loser learns whose record it is; rising records end at the greatest value raised,
// whatever the order the puts land in, and no raise is lost.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { BlobStore } from '../../src/blob-store/blob-store';
import { EpochStore } from '../../src/shared-directory/epochs';
import { GrantStore } from '../../src/shared-directory/grant-store';
import { HolderFences } from '../../src/shared-directory/holder-fences';
import { preferredTenantId, TenantRegistry } from '../../src/shared-directory/tenant-registry';
import { startSeaweedfs, type SeaweedfsServer } from '../support/seaweedfs';
import { testRecordSeal } from './fixtures/test-records';

const RACERS = 32;
/** Rounds of each race: SeaweedFS takes up to seconds to settle a contended conditional write (fence-race.test.ts). */
const ROUNDS = 3;

let server: SeaweedfsServer;
const stores: BlobStore[] = [];
beforeAll(async () => {
  server = await startSeaweedfs();
}, 120_000);
afterAll(async () => {
  await Promise.all(stores.map((store) => store.close()));
  await server?.close();
});

/** One worker's view of the bucket: its own client, under the tier prefix every worker uses. */
function workerStore(): BlobStore {
  const store = server.store({ prefix: 'tier/' });
  stores.push(store);
  return store;
}

const racers = <T>(open: (store: BlobStore, i: number) => Promise<T>): Promise<T[]> =>
  Promise.all(Array.from({ length: RACERS }, (_, i) => open(workerStore(), i)));

describe('shared records in an S3 bucket', () => {
  it('32 workers granting one context to 32 agents at once: exactly one wins, every other learns it is taken', async () => {
    const grants = await racers((store) => GrantStore.open(store, 'grants/', testRecordSeal()));
    for (let round = 0; round < ROUNDS; round++) {
      const contextId = `raced-${round}`;
      const outcomes = await Promise.allSettled(
        grants.map((store, i) => store.put({ contextId, tenant: `tenant-${i}`, agentId: `agent-${i}` })),
      );
      const winners = outcomes.flatMap((outcome, i) => (outcome.status === 'fulfilled' ? [{ i, created: outcome.value }] : []));
      expect(winners, `round ${round}`).toHaveLength(1);
      expect(winners[0]!.created).toBe(true);
      const refused = outcomes
        .filter((outcome) => outcome.status === 'rejected')
        .map((outcome) => (outcome as PromiseRejectedResult).reason);
      expect(refused.map((err) => err.code)).toEqual(Array(RACERS - 1).fill('PERMISSION_DENIED'));
      const winner = winners[0]!.i;
      const onFile = { contextId, tenant: `tenant-${winner}`, agentId: `agent-${winner}` };
      // Every worker reads the winner's grant, and the winner's retry is no new grant.
      for (const store of grants) expect(await store.get(contextId)).toEqual(onFile);
      expect(await grants[winner]!.put(onFile)).toBe(false);
    }
  }, 180_000);

  it('32 workers asking for one tenant id at once all get the same one; 32 names asked for at once each get their own', async () => {
    const registries = await racers((store) => TenantRegistry.open(store, 'tenants/', testRecordSeal()));
    const ids = await Promise.all(registries.map((registry) => registry.idOf('acme')));
    expect(new Set(ids)).toEqual(new Set([preferredTenantId('acme')]));
    const names = Array.from({ length: RACERS }, (_, i) => `tenant-${i}`);
    const assigned = await Promise.all(registries.map((registry, i) => registry.idOf(names[i]!)));
    expect(new Set(assigned).size).toBe(RACERS);
    const fresh = await TenantRegistry.open(workerStore(), 'tenants/', testRecordSeal());
    for (const [i, name] of names.entries()) expect(await fresh.idOf(name)).toBe(assigned[i]);
  }, 180_000);

  it('32 workers raising one epoch at once, in rounds: the record is the greatest raised, and no raise is lost', async () => {
    const epochs = await racers((store) => EpochStore.open(store, 'epochs/', testRecordSeal()));
    let greatest = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const values = epochs.map((_, i) => 1 + round * RACERS + ((i * 7) % RACERS));
      await Promise.all(epochs.map((store, i) => store.raise('planner', values[i]!)));
      greatest = Math.max(greatest, ...values);
      // Every worker, and a fresh one, reads the greatest; a lower raise after it changes nothing.
      for (const store of epochs) expect(await store.minimum('planner')).toBe(greatest);
      await epochs[0]!.raise('planner', 1);
      expect(await (await EpochStore.open(workerStore(), 'epochs/', testRecordSeal())).minimum('planner')).toBe(greatest);
    }
  }, 180_000);

  it('32 holders claiming one context at once: the latest claim holds it, and every other holder knows it lost', async () => {
    const fences = await racers((store, i) => HolderFences.open(store, 'fences/', `queue@worker-${i}`, testRecordSeal()));
    const outcomes = await Promise.allSettled(fences.map((store, i) => store.claim('planner', 1 + ((i * 11) % RACERS), 1)));
    const latest = fences.findIndex((_, i) => 1 + ((i * 11) % RACERS) === RACERS);
    expect(outcomes[latest]!.status).toBe('fulfilled');
    for (const outcome of outcomes) if (outcome.status === 'rejected') expect(outcome.reason).toMatchObject({ code: 'STALE_HANDLE' });
    const holding = await Promise.all(fences.map((store) => store.stillHolder('planner')));
    expect(holding.flatMap((held, i) => (held ? [i] : []))).toEqual([latest]);
  }, 180_000);
});
