// Cold prefixes under the races a fleet has: an idle holder's expiry deletes its cold copies (forget) while
// a first call adopts them, in the same worker or in another one on the same cold directory. An adoption
// then either gets the whole prefix, byte for byte, or finds nothing and prefills: it never fails, leaves
// no half copy, and no segment an adopted holder needs is deleted under it.
import { afterEach, describe, expect, it } from 'vitest';

import { expectSameBytes, tokenBytes } from '../fabric/implementations';
import { keysOf, openColdWorkers, publishHolder, TPB, type ColdWorker } from './cold-workers-fixture';

let opened: Awaited<ReturnType<typeof openColdWorkers>> | undefined;
afterEach(async () => {
  await opened?.close();
  opened = undefined;
});

const ROUNDS = 12;

/** Each round: `writer` publishes, drops its holder, then forgets its copies while `adopter` adopts them, delayed by 0-3 ticks. */
async function race(writer: ColdWorker, adopter: ColdWorker): Promise<{ adopted: number; missed: number }> {
  let adopted = 0;
  let missed = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const tokens = Uint32Array.from({ length: 8 * TPB }, (_, i) => 1000 * round + i);
    const kv = tokenBytes(tokens.length, round);
    const keys = await publishHolder(writer, tokens, kv);
    await writer.tiers.release(writer.tiers.contextIds().find((id) => id.startsWith('prefix-'))!);
    const delay = async (ticks: number) => {
      for (let i = 0; i < ticks; i++) await new Promise((resolve) => setImmediate(resolve));
    };
    const [result] = await Promise.all([
      delay(round % 4).then(() => adopter.prefixes.adopt(1, keysOf(tokens), tokens, 0)),
      delay((round + 2) % 4).then(() => writer.prefixes.forget(keys)),
    ]);
    if (result === undefined) {
      missed++;
    } else {
      adopted++;
      expectSameBytes(
        await adopter.tiers.read(result.holderId, 0, result.blocks * TPB),
        kv.subarray(0, result.blocks * TPB * (kv.length / tokens.length)),
      );
      // Its own copy: the bytes stay when the disk copy is all there is.
      await adopter.tiers.demote(result.holderId, 'disk');
      expectSameBytes(
        await adopter.tiers.read(result.holderId, 0, result.blocks * TPB),
        kv.subarray(0, result.blocks * TPB * (kv.length / tokens.length)),
      );
      await adopter.tiers.release(result.holderId);
    }
    expect(adopter.tiers.contextIds()).toEqual([]); // no recovered cold copy or half holder left behind
    await writer.prefixes.forget(keys); // what an adoption kept from the expiry goes now
  }
  return { adopted, missed };
}

describe('cold prefixes: expiry racing adoption', () => {
  it("another worker's adoption gets the whole prefix or nothing while the writer forgets its copies", async () => {
    opened = await openColdWorkers(2);
    const [writer, adopter] = opened.workers;
    const { adopted, missed } = await race(writer!, adopter!);
    expect(adopted + missed).toBe(ROUNDS);
    expect((await writer!.cold.listManifests()).filter((id) => id.startsWith('prefix/'))).toEqual([]);
    expect(await writer!.cold.listSegments()).toEqual([]);
  });

  it("the same worker's adoption and expiry of one prefix wait for each other", async () => {
    opened = await openColdWorkers(1);
    const [worker] = opened.workers;
    const { adopted, missed } = await race(worker!, worker!);
    // Whichever was called first runs first: an adoption before the expiry gets the prefix, one after finds none.
    expect(adopted).toBe(ROUNDS / 2);
    expect(missed).toBe(ROUNDS / 2);
    expect((await worker!.cold.listManifests()).filter((id) => id.startsWith('prefix/'))).toEqual([]);
    expect(await worker!.cold.listSegments()).toEqual([]);
  });
});

describe("cold prefixes: a dead worker's copies", () => {
  it('are deleted by age, with their segments; a live holder keeps its pages and writes its copies anew', async () => {
    opened = await openColdWorkers(2);
    const [dead, survivor] = opened.workers;
    const old = Uint32Array.from({ length: 4 * TPB }, (_, i) => 40 + i);
    const young = Uint32Array.from({ length: 2 * TPB }, (_, i) => 900 + i);
    await publishHolder(dead!, old, tokenBytes(old.length, 1));
    const writtenAt = Date.now();
    // The dead worker's holders are gone with it: no expiry of theirs will ever delete their copies.
    for (const id of dead!.tiers.contextIds()) await dead!.tiers.release(id);
    const youngKeys = await publishHolder(survivor!, young, tokenBytes(young.length, 2));
    const prefixes = async () => (await survivor!.cold.listManifests()).filter((id) => id.startsWith('prefix/')).length;
    expect(await prefixes()).toBe(3 + 2);

    // Not old enough yet: nothing goes.
    expect(await survivor!.prefixes.sweepOlderThan(60_000, writtenAt + 1_000)).toBe(0);
    // An hour on, the survivor's own holder was in use: its copies go as well, and it writes them anew on its next publish.
    expect(await survivor!.prefixes.sweepOlderThan(60_000, writtenAt + 3_600_000)).toBe(5);
    expect(await prefixes()).toBe(0);
    // What is left on disk is the disk copy of the survivor's holder's blocks, which it still uses.
    const holderId = survivor!.tiers.contextIds().find((id) => id.startsWith('prefix-'))!;
    expect((await survivor!.cold.listSegments()).length).toBe(1);
    // Its next store writes the copies again; releasing it leaves nothing.
    await survivor!.prefixes.store(holderId, youngKeys, young);
    expect(await prefixes()).toBe(2);
    await survivor!.tiers.release(holderId);
    await survivor!.prefixes.forget(youngKeys);
    expect(await survivor!.cold.listSegments()).toEqual([]);
  });
});
