// The POSIX backend's conditions across processes: 4 processes with 8 writers each race on one create-once
// key and on one record at a version all of them read, round after round. Exactly one put of the 32 wins
// each round, every other one is refused, and the file holds the winner's bytes at the winner's version:
// the claims (version-claims.ts) hold across processes, not just across one process's promises.
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { BlobCondition } from '../../src/blob-store/blob-store';
import { PosixBlobStore } from '../../src/blob-store/posix/posix-blob-store';
import type { BlobRace, BlobRaceOutcome } from './fixtures/blob-racer';

const PROCESSES = 4;
const WRITERS_EACH = 8;
const ROUNDS = 25;

let racers: ChildProcess[] = [];
let root: string;

function nextMessage<T>(child: ChildProcess): Promise<T> {
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`a racer exited (${code}) before it answered`));
    child.once('exit', onExit);
    child.once('message', (message: T) => {
      child.off('exit', onExit);
      resolve(message);
    });
  });
}

beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'kvfabric-blob-processes-'));
  racers = Array.from({ length: PROCESSES }, () =>
    fork(path.join(__dirname, 'fixtures', 'blob-racer.ts'), [], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
  await Promise.all(racers.map((child) => nextMessage<string>(child)));
}, 60_000);

afterAll(async () => {
  for (const child of racers) child.kill();
  rmSync(root, { recursive: true, force: true });
});

/** One round: every racer's writers put at one instant; the outcomes with the bodies they tried. */
async function race(key: string, condition: BlobCondition, round: number): Promise<{ body: string; outcome: BlobRaceOutcome }[]> {
  // Far enough ahead that every racer has its order before the instant comes.
  const at = performance.timeOrigin + performance.now() + 20;
  const orders = racers.map((_, p) => Array.from({ length: WRITERS_EACH }, (_, w) => `round ${round} process ${p} writer ${w}`));
  const replies = await Promise.all(
    racers.map((child, p) => {
      const reply = nextMessage<BlobRaceOutcome[]>(child);
      child.send({ root, key, condition, bodies: orders[p]!, at } satisfies BlobRace);
      return reply;
    }),
  );
  return replies.flatMap((outcomes, p) => outcomes.map((outcome, w) => ({ body: orders[p]![w]!, outcome })));
}

async function expectOneWinner(store: PosixBlobStore, key: string, results: { body: string; outcome: BlobRaceOutcome }[]) {
  const winners = results.filter(({ outcome }) => 'won' in outcome);
  expect(winners).toHaveLength(1);
  expect(results.filter(({ outcome }) => 'refused' in outcome && outcome.refused === 'PRECONDITION_FAILED')).toHaveLength(
    PROCESSES * WRITERS_EACH - 1,
  );
  const read = await store.get(key);
  expect(read?.bytes.toString()).toBe(winners[0]!.body);
  expect(read?.version).toBe((winners[0]!.outcome as { won: string }).won);
}

describe(`POSIX blob store: ${PROCESSES} processes x ${WRITERS_EACH} writers`, () => {
  it('one winner a round on a create-once key', async () => {
    const store = await PosixBlobStore.open(root);
    for (let round = 0; round < ROUNDS; round++) {
      await expectOneWinner(store, `once/${round}`, await race(`once/${round}`, { ifNoneMatch: '*' }, round));
    }
  }, 120_000);

  it('one winner a round on a record all of them read at one version', async () => {
    const store = await PosixBlobStore.open(root);
    await store.put('record', Buffer.from('initial'));
    for (let round = 0; round < ROUNDS; round++) {
      const { version } = (await store.head('record'))!;
      await expectOneWinner(store, 'record', await race('record', { ifMatch: version }, round));
    }
  }, 120_000);
});
