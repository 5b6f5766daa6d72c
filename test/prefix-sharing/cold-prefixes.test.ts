// Shared prefixes through the cold tier, between two workers' tier layers (two pools, one cold directory)
// with the real cold store: a holder written by one is adopted by the other from its keys alone, byte for
// byte, into pages of its own (so deleting the cold copy leaves it whole); a longer prompt takes the
// longest power-of-two run written; nothing is found for other keys; the copies go with forget(); and a
// worker's prefix idle time must be a whole number of ms.
import { afterEach, describe, expect, it } from 'vitest';

import { MODELS } from '../../src/engines/models';
import { SyntheticEngine } from '../../src/engines/synthetic/synthetic-engine';
import { ColdPrefixes } from '../../src/prefix-sharing/cold-prefixes';
import { coldPrefixIdOf, holderIdOf } from '../../src/prefix-sharing/prefix-names';
import { PrefixSharing } from '../../src/prefix-sharing/prefix-sharing';
import type { ColdStore } from '../../src/tiers/cold';
import { expectSameBytes, tokenBytes, TINY_BYTES_PER_TOKEN } from '../fabric/implementations';
import { keysOf, noteOf, openColdWorkers, publishHolder, salts, TPB, type ColdWorker } from './cold-workers-fixture';

let opened: Awaited<ReturnType<typeof openColdWorkers>> | undefined;
afterEach(async () => {
  await opened?.close();
  opened = undefined;
});
/** `count` workers on one cold directory, closed after the test. */
async function workers(count: number): Promise<ColdWorker[]> {
  opened = await openColdWorkers(count);
  return opened.workers;
}

const tokensOf = (count: number, seed = 0) => Uint32Array.from({ length: count }, (_, i) => 100 + seed + i);
const prefixManifests = async (cold: ColdStore) => (await cold.listManifests()).filter((id) => id.startsWith('prefix/'));

describe('cold prefixes', () => {
  it('writes the run and each power of two below it, longest first', () => {
    expect(ColdPrefixes.lengths(0)).toEqual([]);
    expect(ColdPrefixes.lengths(1)).toEqual([1]);
    expect(ColdPrefixes.lengths(8)).toEqual([8, 4, 2, 1]);
    expect(ColdPrefixes.lengths(11)).toEqual([11, 8, 4, 2, 1]);
  });

  it("another worker adopts a holder's pages byte for byte into its own blocks, and keeps them when the cold copy goes", async () => {
    const [first, second] = await workers(2);
    const tokens = tokensOf(8 * TPB);
    const kv = tokenBytes(tokens.length, 7);
    const keys = await publishHolder(first!, tokens, kv);
    expect((await prefixManifests(first!.cold)).sort()).toEqual([8, 4, 2, 1].map((blocks) => coldPrefixIdOf(keys[blocks - 1]!)).sort());
    expect(first!.tiers.contextIds().some((id) => id.startsWith('prefix/'))).toBe(false); // written, then let go

    // The other worker's prompt: the same 8 blocks and 2 more of its own.
    const prompt = new Uint32Array([...tokens, ...tokensOf(2 * TPB, 9000)]);
    const adopted = await second!.prefixes.adopt(1, keysOf(prompt), prompt, 0);
    expect(adopted).toEqual({ holderId: holderIdOf(keys[7]!), blocks: 8 });
    expectSameBytes(await second!.tiers.read(adopted!.holderId, 0, tokens.length), kv);
    expect(second!.tiers.attachment(adopted!.holderId)).toEqual(noteOf(tokens));
    expect(second!.tiers.contextIds()).toEqual([adopted!.holderId]); // the recovered cold copy was let go

    // Deleting the cold copies (the first worker's holder expired) leaves the adopted holder whole.
    await first!.tiers.release(holderIdOf(keys[7]!));
    await first!.prefixes.forget(keys);
    expect(await prefixManifests(first!.cold)).toEqual([]);
    expect(await first!.cold.orphanSegments()).toEqual([]);
    await second!.tiers.demote(adopted!.holderId, 'disk');
    expectSameBytes(await second!.tiers.read(adopted!.holderId, 0, tokens.length), kv);
    await second!.tiers.release(adopted!.holderId);
    expect(await first!.cold.listSegments()).toEqual([]);
  });

  it('a prompt that diverges after block 5 of an 8-block holder takes its 4-block copy; other keys find nothing', async () => {
    const [first, second] = await workers(2);
    const tokens = tokensOf(8 * TPB);
    const kv = tokenBytes(tokens.length, 3);
    await publishHolder(first!, tokens, kv);
    const prompt = new Uint32Array([...tokens.subarray(0, 5 * TPB + 1), ...tokensOf(4 * TPB, 5000)]);
    const adopted = await second!.prefixes.adopt(1, keysOf(prompt), prompt, 0);
    expect(adopted?.blocks).toBe(4);
    expectSameBytes(await second!.tiers.read(adopted!.holderId, 0, 4 * TPB), kv.subarray(0, 4 * TPB * TINY_BYTES_PER_TOKEN));
    // Past what it holds already (4 blocks here), nothing longer is written.
    expect(await second!.prefixes.adopt(1, keysOf(prompt), prompt, 4)).toBeUndefined();
    // Another tenant's keys for the very same tokens name nothing.
    expect(await second!.prefixes.adopt(1, keysOf(tokens, 'other'), tokens, 0)).toBeUndefined();
    const unrelated = tokensOf(8 * TPB, 777);
    expect(await second!.prefixes.adopt(1, keysOf(unrelated), unrelated, 0)).toBeUndefined();
  });

  it('an adoption checks no manifest for garbage: the cold copy it lets go of still names its segments', async () => {
    const [first, second] = await workers(2);
    const tokens = tokensOf(4 * TPB);
    const keys = await publishHolder(first!, tokens, tokenBytes(tokens.length, 4));
    // Many other contexts in the tier: a garbage collection would read every one of their manifests.
    for (let i = 0; i < 5; i++) await publishHolder(first!, tokensOf(2 * TPB, 3000 + 100 * i), tokenBytes(2 * TPB, i));
    let collections = 0;
    const orphanSegments = second!.cold.orphanSegments.bind(second!.cold);
    second!.cold.orphanSegments = (options) => {
      collections++;
      return orphanSegments(options);
    };
    const adopted = await second!.prefixes.adopt(1, keys, tokens, 0);
    expect(adopted?.blocks).toBe(4);
    expect(collections).toBe(0);
    // The adopted holder's own blocks, once freed, are collected as any context's.
    await second!.tiers.release(adopted!.holderId);
    expect(collections).toBe(0); // never written to disk: nothing to collect
  });

  it('two first calls of one prompt at once copy it once', async () => {
    const [first, second] = await workers(2);
    const tokens = tokensOf(4 * TPB);
    await publishHolder(first!, tokens, tokenBytes(tokens.length, 1));
    const keys = keysOf(tokens);
    const both = await Promise.all([second!.prefixes.adopt(1, keys, tokens, 0), second!.prefixes.adopt(1, keys, tokens, 0)]);
    expect(both[0]).toEqual(both[1]);
    expect(second!.tiers.contextIds()).toEqual([both[0]!.holderId]);
  });

  it('a prefix idle time that is not a whole number of ms in range is INVALID_ARGUMENT', async () => {
    const [worker] = await workers(1);
    for (const idleMs of [-1, 1.5, Number.NaN, 2 ** 31]) {
      expect(
        () =>
          new PrefixSharing({
            salts,
            tokensPerBlock: TPB,
            tiers: worker!.tiers,
            engine: new SyntheticEngine({ model: MODELS.tiny!, contextLength: 4096 }),
            idleMs,
          }),
      ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    }
  });
});
