// The manifest log on a real S3 server (SeaweedFS): a hot turn's durable copy puts about the same bytes
// at 8k tokens of context as at 512 (what the turn added, not the context), and of two holders racing
// for the next version through the bucket exactly one wins; a stale holder's delete of a context another
// worker took over is refused (If-Match on the base, the next record claimed). The POSIX runs are in
// test/tiers/cold/manifest-log.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { ColdStore, KeyRing } from '../../src/tiers/cold';
import { tinyShape } from '../fabric/implementations';
import { startSeaweedfs, type SeaweedfsServer } from '../support/seaweedfs';
import { blocksOf, manifestOf } from './cold/helpers';
import { CountingBlobStore } from './fixtures/counting-blob-store';
import { blobWrites, hotTurnBytes, type Written } from './fixtures/hot-turns';
import { staleDeleteIsRefused, writeHeldDeleteOut } from './fixtures/stale-delete';

let server: SeaweedfsServer;
const closing: { close(): Promise<void> }[] = [];
const ring = () => new KeyRing([{ id: 'k1', key: Buffer.alloc(32, 3) }], 'k1');

beforeAll(async () => {
  server = await startSeaweedfs();
}, 120_000);
afterAll(async () => {
  for (const open of closing.splice(0).reverse()) await open.close();
  await server?.close();
});

async function openCold(prefix: string): Promise<{ cold: ColdStore; counting: CountingBlobStore }> {
  const counting = new CountingBlobStore(server.store({ prefix }));
  const cold = await ColdStore.open({ store: counting, keyRing: ring(), cryptoThreads: 1 });
  closing.push(counting, cold);
  return { cold, counting };
}

describe('the manifest log in an S3 bucket', () => {
  it('a hot turn puts what it added: about the same bytes at 8k tokens of context as at 512', async () => {
    const perTurn: Record<number, Written> = {};
    for (const contextTokens of [512, 8192]) {
      const { cold, counting } = await openCold(`turns-${contextTokens}/`);
      perTurn[contextTokens] = await hotTurnBytes({
        cold,
        written: blobWrites(counting),
        shape: tinyShape,
        contextTokens,
        turns: 12,
        turnTokens: 32,
      });
    }
    const [small, large] = [perTurn[512]!, perTurn[8192]!];
    // A whole manifest of 8k tokens (512 page refs, 8192 token ids) is over 60 KB: a turn puts far less.
    expect(large.metadata).toBeLessThan(3_000);
    expect(large.total / small.total).toBeLessThanOrEqual(1.25);
    expect(large.metadata / small.metadata).toBeLessThanOrEqual(1.25);
  }, 120_000);

  it('of two holders racing for the next version through the bucket, exactly one wins', async () => {
    const { cold: first } = await openCold('race/');
    const { cold: second } = await openCold('race/');
    const refs = await first.writeSegment({ tenant: 1, contextId: 'r', version: 1 }, blocksOf(2, 32, 1));
    const v1 = manifestOf({ tenant: 1, contextId: 'r', version: 1 }, refs);
    await first.writeManifest(v1, { replaces: 'none' });
    expect((await second.readManifest('r')).version).toBe(1);
    for (let round = 2; round < 12; round++) {
      const outcomes = await Promise.allSettled(
        [first, second].map((cold, i) =>
          cold.writeManifest({ ...v1, version: round, createdAt: `${round}-${i}` }, { replaces: round - 1 }),
        ),
      );
      const won = outcomes.flatMap((outcome, i) => (outcome.status === 'fulfilled' ? [i] : []));
      expect(won).toHaveLength(1);
      const lost = outcomes.find((outcome) => outcome.status === 'rejected') as PromiseRejectedResult;
      expect(lost.reason.code).toBe('STALE_HANDLE');
      // Both read what the winner wrote, and race for the next one from there.
      for (const cold of [first, second]) expect((await cold.readManifest('r')).createdAt).toBe(`${round}-${won[0]}`);
    }
  }, 120_000);

  it("refuses a stale holder's delete once another worker wrote the context; of a delete and a write racing, exactly one happens", async () => {
    await staleDeleteIsRefused(async () => (await openCold('stale-delete/')).cold);
  }, 120_000);

  it('of a delete paused before it removes the base and a write meanwhile, exactly one happens', async () => {
    const store = server.store({ prefix: 'paused-delete/' });
    closing.push(store);
    await writeHeldDeleteOut(store, async (on) => {
      const cold = await ColdStore.open({ store: on, keyRing: ring(), cryptoThreads: 1 });
      closing.push(cold);
      return cold;
    });
  }, 120_000);
});
