// Shared prefixes across workers, restarts and time, with the real model (SmolLM2 through llama.cpp, two
// workers' AgentMemory on one tier directory: their cold tier and records): a second worker's agent adopts
// the first's prefix from the cold tier by its keys and replies token for token as an agent that prefilled
// itself (one thread, 32 tokens a pass: docs/ai-sdk.md#identical-replies), and keeps it when the first
// worker's copies go; a worker started later adopts it too; a refused cold copy costs a prefill and no
// page; an unused prefix stays for the idle time, then goes from memory and from the cold tier.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { isFabricError } from '../../src/fabric/errors';
import { coldPrefixIdOf } from '../../src/prefix-sharing/prefix-names';
import { prefixKeys, TenantSalts } from '../../src/prefix-sharing/prefix-keys';
import { ColdStore, KeyRing } from '../../src/tiers/cold';
import { manifestFileName } from '../../src/tiers/cold/context-names';
import { TEST_KEY_RING } from '../shared-directory/fixtures/test-records';
import { openSharingMemory, SHARED, type SharingMemory, type SharingMemoryOptions } from './sharing-memory-fixture';

let tierDir: string;
const opened: SharingMemory[] = [];

beforeAll(() => {
  tierDir = mkdtempSync(join(tmpdir(), 'kvfabric-cross-worker-'));
});
afterAll(async () => {
  for (const worker of opened) await worker.close();
  rmSync(tierDir, { recursive: true, force: true });
});

/** A worker on the shared tier directory. */
async function worker(name: string, options: SharingMemoryOptions = {}): Promise<SharingMemory> {
  const memory = await openSharingMemory(name, { tierDir, ...options });
  opened.push(memory);
  return memory;
}

async function close(memory: SharingMemory): Promise<void> {
  opened.splice(opened.indexOf(memory), 1);
  await memory.close();
}

/** Every full block of the prompt but its last token's (what a first call's pages hold). */
const fullBlocks = (prompt: Uint32Array) => Math.floor((prompt.length - 1) / 16) * 16;

/** The context ids of holders and cold prefixes on a worker, and the cold prefixes in the tier. */
async function prefixesOf(memory: SharingMemory): Promise<{ holders: number; cold: number }> {
  const ids = memory.fx.tiers.contextIds();
  const store = await ColdStore.open({ directory: join(tierDir, 'cold'), keyRing: TEST_KEY_RING });
  const cold = (await store.listManifests()).filter((id) => id.startsWith('prefix/')).length;
  await store.close();
  return { holders: ids.filter((id) => id.startsWith('prefix-')).length, cold };
}

describe('shared prefixes across workers, real model', () => {
  it("a second worker's agent adopts the prefix from the cold tier and replies as one that prefilled itself", async () => {
    const first = await worker('cross-first');
    const second = await worker('cross-second');
    const message = `${SHARED} Which file holds the cold tier?`;
    const prompt = first.promptOf(message);

    const a = await first.firstTurn('cross-a', 'acme', message);
    expect(first.prefills.get('cross-a')).toEqual({ sharedTokens: 0, evaluatedTokens: prompt.length });
    expect((await prefixesOf(first)).cold).toBeGreaterThanOrEqual(2); // the run and the powers of two below it

    const b = await second.firstTurn('cross-b', 'acme', message);
    const shared = fullBlocks(prompt);
    expect(second.prefills.get('cross-b')).toEqual({ sharedTokens: shared, evaluatedTokens: prompt.length - shared });
    const whole = await second.firstTurn('cross-whole', 'acme', message, 'none');
    expect(b.result.reply).toEqual(whole.result.reply);
    expect(b.result.added).toEqual(whole.result.added);
    expect(b.result.reply).toEqual(a.result.reply);

    // The first worker lets go of everything: its holder and the cold copies go (no idle time here).
    await first.release('cross-a', 'acme', a.token);
    expect(await prefixesOf(first)).toEqual({ holders: 0, cold: 0 });
    // The second worker's holder is a copy of its own: its agent goes on, as the one that prefilled.
    const next = (turn: typeof b.result) => ({
      turn: 1,
      before: turn.digest,
      tail: turn.added!.slice(turn.digest.tokens),
      tenant: 'acme',
      maxTokens: 8,
    });
    const b2 = await second.say('cross-b', b.token, 'And who reads it?', next(b.result));
    const w2 = await second.say('cross-whole', whole.token, 'And who reads it?', next(whole.result));
    expect(b2.reply).toEqual(w2.reply);
    await second.fx.memory.settled();
    await second.release('cross-b', 'acme', b.token);
    await second.release('cross-whole', 'acme', whole.token);
    expect(await prefixesOf(second)).toEqual({ holders: 0, cold: 0 });
    expect(second.fx.memory.stats().usedBlocks).toBe(0);
    await close(first);
    await close(second);
  });

  it('a worker started after the publisher closed adopts its prefix', async () => {
    const message = `${SHARED} Where are segments named?`;
    const publisher = await worker('restart-before');
    const a = await publisher.firstTurn('restart-a', 'acme', message);
    await close(publisher); // closed with its agent held: its cold copies stay
    const later = await worker('restart-after');
    expect((await prefixesOf(later)).cold).toBeGreaterThanOrEqual(2);
    const b = await later.firstTurn('restart-b', 'acme', message);
    const prompt = later.promptOf(message);
    expect(later.prefills.get('restart-b')).toEqual({
      sharedTokens: fullBlocks(prompt),
      evaluatedTokens: prompt.length - fullBlocks(prompt),
    });
    expect(b.result.reply).toEqual(a.result.reply);
    await later.release('restart-b', 'acme', b.token);
    await close(later);
  });

  it('a cold copy the cold tier refuses is reported, and the agent prefills: no page of it is lent', async () => {
    const refusals: unknown[] = [];
    const victim = await worker('refused', { onBackgroundError: (_what, err) => refusals.push(err) });
    const message = `${SHARED} Which tenant is this?`;
    const prompt = victim.promptOf(message);
    // An object of an attacker's at the name the tenant's first turn looks up (it sees names in the tier).
    const salts = new TenantSalts(new KeyRing([{ id: 'w', key: Buffer.alloc(32, 9) }], 'w'));
    const keys = prefixKeys(prompt.subarray(0, prompt.length - 1), {
      fingerprint: victim.engine.fingerprint,
      salt: salts.of('globex'),
      tokensPerBlock: 16,
    });
    writeFileSync(join(tierDir, 'cold', 'manifests', manifestFileName(coldPrefixIdOf(keys.at(-1)!))), Buffer.alloc(700, 1));
    const a = await victim.firstTurn('refused-a', 'globex', message);
    expect(victim.prefills.get('refused-a')).toEqual({ sharedTokens: 0, evaluatedTokens: prompt.length });
    expect(refusals.some((err) => isFabricError(err, 'INTEGRITY'))).toBe(true);
    const whole = await victim.firstTurn('refused-whole', 'globex', message, 'none');
    expect(a.result.added).toEqual(whole.result.added);
    await victim.release('refused-a', 'globex', a.token);
    await victim.release('refused-whole', 'globex', whole.token);
    await close(victim);
  });

  it('an unused prefix stays for the idle time, is taken meanwhile, then goes from every tier', async () => {
    const idleMs = 1500;
    const memory = await worker('idle', { prefixIdleMs: idleMs });
    const baseline = memory.fx.memory.stats().usedBlocks;
    const message = `${SHARED} Who frees idle prefixes?`;
    const prompt = memory.promptOf(message);
    const a = await memory.firstTurn('idle-a', 'initech', message);
    await memory.release('idle-a', 'initech', a.token);
    // Nobody refers to it, yet it stays: in memory and in the cold tier.
    const held = await prefixesOf(memory);
    expect(held.holders).toBe(1);
    expect(held.cold).toBeGreaterThanOrEqual(2);
    expect(memory.fx.memory.stats().usedBlocks).toBeGreaterThan(baseline);
    const b = await memory.firstTurn('idle-b', 'initech', message);
    expect(memory.prefills.get('idle-b')?.sharedTokens).toBe(fullBlocks(prompt));
    await memory.release('idle-b', 'initech', b.token);
    const released = performance.now();
    while ((await prefixesOf(memory)).holders > 0 && performance.now() - released < idleMs + 5000) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(performance.now() - released).toBeGreaterThanOrEqual(idleMs - 50);
    await memory.fx.memory.settled();
    expect(await prefixesOf(memory)).toEqual({ holders: 0, cold: 0 });
    expect(memory.fx.memory.stats().usedBlocks).toBe(baseline);
    await close(memory);
  });
});
