// Prefix sharing within a tenant with the real model (SmolLM2 through llama.cpp, the real pool and
// AgentMemory): a later agent of the tenant evaluates only what follows the shared blocks and replies
// token for token as an agent that prefilled everything itself (one thread, 32 tokens a pass:
// docs/ai-sdk.md#identical-replies); a divergence shares only the blocks before it; another tenant shares
// nothing; agents starting at once prefill their common prefix once; and the shared blocks are freed only
// when their last holder goes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { sharedPrefix } from '../../src/engines/shared-prefix';
import { openSharingMemory, SHARED, type Prefill, type SharingMemory } from './sharing-memory-fixture';

let opened: SharingMemory;
let prefills: Map<string, Prefill>;

beforeAll(async () => {
  opened = await openSharingMemory('prefix-sharing');
  prefills = opened.prefills;
});
afterAll(async () => {
  await opened?.close();
});

const firstTurn = (agentId: string, tenant: string, message: string, sharing?: 'tenant' | 'none') =>
  opened.firstTurn(agentId, tenant, message, sharing);

const promptOf = (message: string) => opened.promptOf(message);

describe('prefix sharing within a tenant, real model', () => {
  it('shares the prefix, evaluates only the rest, replies as a whole prefill; frees blocks with the last holder', async () => {
    const baseline = opened.fx.memory.stats();
    const first = `${SHARED} Which file holds the allocator?`;
    const second = `${SHARED} Where is the checksum computed?`;
    const prompt = promptOf(second);
    const common = sharedPrefix(promptOf(first), prompt);
    expect(common).toBeGreaterThanOrEqual(2 * 16);

    const a = await firstTurn('share-a', 'acme', first);
    expect(prefills.get('share-a')).toEqual({ sharedTokens: 0, evaluatedTokens: promptOf(first).length });
    const b = await firstTurn('share-b', 'acme', second);
    const shared = Math.floor(common / 16) * 16;
    expect(prefills.get('share-b')).toEqual({ sharedTokens: shared, evaluatedTokens: prompt.length - shared });
    expect(b.result.sharedBlocks).toBeGreaterThanOrEqual(2);

    const whole = await firstTurn('share-none', 'acme', second, 'none');
    expect(prefills.has('share-none')).toBe(false); // no sharing: engine.turn prefilled it all
    expect(whole.result.reply).toEqual(b.result.reply);
    expect(whole.result.added).toEqual(b.result.added);

    // A third agent with the same prompt takes all of its full blocks, loaded from the pages alone.
    const c = await firstTurn('share-c', 'acme', second);
    const all = Math.floor((prompt.length - 1) / 16) * 16;
    expect(prefills.get('share-c')).toEqual({ sharedTokens: all, evaluatedTokens: prompt.length - all });
    expect(c.result.added).toEqual(whole.result.added);
    await opened.release('share-c', 'acme', c.token);

    // The conversation continues from the shared pages like any other.
    // As the workflow records it (AgentRun.recordPages): the tail is what the pages did not hold.
    const next = (turn: { digest: typeof b.result.digest; added?: number[] }) => ({
      turn: 1,
      before: turn.digest,
      tail: turn.added!.slice(turn.digest.tokens),
      tenant: 'acme',
      maxTokens: 8,
    });
    expect(b.result.digest.tokens).toBe(shared);
    const b2 = await opened.say('share-b', b.token, 'And why there?', next(b.result));
    const w2 = await opened.say('share-none', whole.token, 'And why there?', next(whole.result));
    expect(b2.reply).toEqual(w2.reply);
    await opened.fx.memory.settled();

    // The publisher goes first: the blocks it shared stay for the agent still using them.
    await opened.release('share-a', 'acme', a.token);
    expect(opened.fx.tiers.contextStats('share-b').sharedBlocks).toBeGreaterThanOrEqual(2);
    expect(opened.fx.memory.stats().usedBlocks).toBeGreaterThan(baseline.usedBlocks);
    await opened.release('share-b', 'acme', b.token);
    await opened.release('share-none', 'acme', whole.token);
    const after = opened.fx.memory.stats();
    expect({ used: after.usedBlocks, host: after.host.usedBlocks, contexts: after.contexts, shared: after.sharedBlocks }).toEqual({
      used: baseline.usedBlocks,
      host: baseline.host.usedBlocks,
      contexts: baseline.contexts,
      shared: 0,
    });
  });

  it('a divergence in block 1 shares block 0 only', async () => {
    const one = await firstTurn('div-a', 'divergers', `${SHARED} One.`);
    const probe = promptOf(`Short. ${SHARED} One.`);
    const common = sharedPrefix(promptOf(`${SHARED} One.`), probe);
    expect(common).toBeGreaterThanOrEqual(16);
    expect(common).toBeLessThan(32); // the default system prompt fills block 0; the message starts in block 1
    const two = await firstTurn('div-b', 'divergers', `Short. ${SHARED} One.`);
    expect(prefills.get('div-b')).toEqual({ sharedTokens: 16, evaluatedTokens: probe.length - 16 });
    await opened.release('div-a', 'divergers', one.token);
    await opened.release('div-b', 'divergers', two.token);
  });

  it("another tenant's agent with the very same prompt shares nothing", async () => {
    const message = `${SHARED} Which file holds the tier moves?`;
    const a = await firstTurn('iso-a', 'tenant-a', message);
    const b = await firstTurn('iso-b', 'tenant-b', message);
    expect(prefills.get('iso-b')).toEqual({ sharedTokens: 0, evaluatedTokens: promptOf(message).length });
    expect(b.result.reply).toEqual(a.result.reply);
    // Disjoint pages: each block is one tenant's (a block shared across tenants would count for both).
    const blocks = opened.fx.tiers.tenantBlocks();
    expect(blocks).toHaveLength(2);
    expect(blocks.reduce((sum, tenant) => sum + tenant.device + tenant.host, 0)).toBe(
      opened.fx.memory.stats().usedBlocks + opened.fx.memory.stats().host.usedBlocks,
    );
    expect(blocks[0]!.device).toBe(blocks[1]!.device);
    await opened.release('iso-a', 'tenant-a', a.token);
    await opened.release('iso-b', 'tenant-b', b.token);
    expect(opened.fx.memory.stats().usedBlocks).toBe(0);
  });

  it('agents of a tenant starting at once prefill their common prefix once: the later ones wait and share it', async () => {
    const message = `${SHARED} Which file holds the allocator?`;
    const all = Math.floor((promptOf(message).length - 1) / 16) * 16;
    const started = await Promise.all(['fleet-a', 'fleet-b', 'fleet-c'].map((agentId) => firstTurn(agentId, 'fleet', message)));
    const shared = ['fleet-a', 'fleet-b', 'fleet-c'].map((agentId) => prefills.get(agentId)?.sharedTokens);
    // One of them prefilled it all; the others took every full block it published.
    expect(shared.filter((tokens) => tokens === 0)).toHaveLength(1);
    expect(shared.filter((tokens) => tokens === all)).toHaveLength(2);
    for (const turn of started) expect(turn.result.added).toEqual(started[0]!.result.added);
    for (const [i, agentId] of ['fleet-a', 'fleet-b', 'fleet-c'].entries()) await opened.release(agentId, 'fleet', started[i]!.token);
  });
});
