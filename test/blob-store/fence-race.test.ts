// The fence race, on both backends: 32 writers race on one create-once key, and on one record each has
// read at the same version (If-Match), for 100 rounds (on S3, KVFABRIC_S3_RACE_ROUNDS, default 10: see
// S3_ROUNDS). Every round must end with exactly one winner and
// 31 refusals (PreconditionFailed, nothing else), and the bytes read back are the winner's, at the
// version its put returned. This is what makes a manifest write or a record a fence: a stale holder's
// late write fails instead of landing.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { isPreconditionFailed } from '../../src/blob-store/blob-errors';
import type { BlobCondition, BlobStore } from '../../src/blob-store/blob-store';
import { PosixBlobStore } from '../../src/blob-store/posix/posix-blob-store';
import { startSeaweedfs, type SeaweedfsServer } from '../support/seaweedfs';

const WRITERS = 32;
const ROUNDS = 100;
/**
 * SeaweedFS answers a contended conditional write in 0.1-12 s (below), so its 100 rounds take about
 * 16 minutes on two cores (measured 2026-12-04: 422 s create-once, 533 s If-Match, every round one
 * winner); `npm test` races 10, and KVFABRIC_S3_RACE_ROUNDS=100 runs them all (docs/testing.md).
 */
const S3_ROUNDS = Number(process.env.KVFABRIC_S3_RACE_ROUNDS ?? 10);

async function race(store: BlobStore, key: string, round: number, condition: BlobCondition): Promise<void> {
  const bodies = Array.from({ length: WRITERS }, (_, writer) => Buffer.from(`round ${round} writer ${writer}`));
  const outcomes = await Promise.allSettled(bodies.map((body) => store.put(key, body, condition)));
  const winners = outcomes.flatMap((outcome, writer) => (outcome.status === 'fulfilled' ? [{ writer, version: outcome.value }] : []));
  const refusals = outcomes.filter((outcome) => outcome.status === 'rejected' && isPreconditionFailed(outcome.reason));
  expect(winners, `round ${round} of ${key}`).toHaveLength(1);
  expect(
    refusals,
    `round ${round} of ${key}: ${outcomes.map((o) => (o.status === 'rejected' ? String(o.reason) : 'won')).join('; ')}`,
  ).toHaveLength(WRITERS - 1);
  const read = await store.get(key);
  expect(read?.bytes.toString()).toBe(bodies[winners[0]!.writer]!.toString());
  expect(read?.version).toBe(winners[0]!.version);
}

async function raceToCreate(store: BlobStore, rounds = ROUNDS): Promise<void> {
  for (let round = 0; round < rounds; round++) await race(store, `fence/create-${round}`, round, { ifNoneMatch: '*' });
}

async function raceToReplace(store: BlobStore, rounds = ROUNDS): Promise<void> {
  await store.put('fence/manifest', Buffer.from('initial'));
  for (let round = 0; round < rounds; round++) {
    const { version } = (await store.head('fence/manifest'))!;
    await race(store, 'fence/manifest', round, { ifMatch: version });
  }
}

let server: SeaweedfsServer;
let root: string;
beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'kvfabric-fence-'));
  server = await startSeaweedfs();
}, 120_000);
afterAll(async () => {
  await server?.close();
  if (root) rmSync(root, { recursive: true, force: true });
});

// SeaweedFS serialises conditional writes to one key through its filer's lock, whose waiters poll about
// once a second: a loser may wait many seconds for its refusal (a round takes 0.1-12 s), so its requests
// get far more than their usual time, and each backend's race its own test. A writer that gets no lock
// within 5 s is answered 503 with nothing written: the SDK tries it again, still conditional. The two S3
// races run at once, on keys of their own: each spends its rounds waiting on its key's lock, not on the CPU.
const S3_RACE = { requestTimeoutMs: 120_000, maxAttempts: 10 };
const S3_RACE_MS = 1_200_000;

async function onS3(prefix: string, run: (store: BlobStore) => Promise<void>): Promise<void> {
  const store = server.store({ ...S3_RACE, prefix });
  try {
    await run(store);
  } finally {
    await store.close();
  }
}

describe(`fence race: ${WRITERS} writers, ${ROUNDS} rounds (${S3_ROUNDS} on S3)`, () => {
  it('POSIX directory: one winner a round on a create-once key', async () => {
    await raceToCreate(await PosixBlobStore.open(root));
  }, 300_000);

  it('POSIX directory: one winner a round on an If-Match record', async () => {
    await raceToReplace(await PosixBlobStore.open(root));
  }, 300_000);

  it.concurrent(
    'S3 on SeaweedFS: one winner a round on a create-once key',
    () => onS3('create/', (store) => raceToCreate(store, S3_ROUNDS)),
    S3_RACE_MS,
  );

  it.concurrent(
    'S3 on SeaweedFS: one winner a round on an If-Match record',
    () => onS3('replace/', (store) => raceToReplace(store, S3_ROUNDS)),
    S3_RACE_MS,
  );
});
