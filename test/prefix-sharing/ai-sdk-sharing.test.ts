// Prefix sharing on the AI SDK's way in, with the real model (SmolLM2 through llama.cpp, the real pool,
// tiers and cold tier): a run's first call takes the longest prefix of its prompt that another run of its
// tenant (its namespace) computed, evaluates only the rest and replies token for token as a run that
// prefilled everything itself (one thread, 32 tokens a pass: docs/ai-sdk.md#identical-replies); a run
// that opts out (providerOptions.kvfabric.sharing 'none') and another namespace's run share nothing; a run
// continues its own KV afterwards; releasing the runs frees the shared blocks with the last of them.
import type { LanguageModelV4CallOptions, LanguageModelV4GenerateResult } from '@ai-sdk/provider';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { modelCallContextId } from '../../src/ai-sdk/model-call-owner';
import { modelCallSharingOf } from '../../src/ai-sdk/model-call-sharing';
import { MODELS } from '../../src/engines/models';
import { sharedPrefix } from '../../src/engines/shared-prefix';
import { SHARED } from './sharing-memory-fixture';
import { figuresOf, openSharingModelCalls, runOf, type SharingModelCalls } from './sharing-model-calls-fixture';

const { tokensPerBlock } = MODELS['smollm2-135m']!;
let fx: SharingModelCalls;

beforeAll(async () => {
  fx = await openSharingModelCalls('ai-sdk-sharing');
}, 120_000);

afterAll(async () => fx?.close());

const generate = (...args: Parameters<SharingModelCalls['generate']>) => fx.generate(...args);

const ticket = (question: string, sharing?: string): LanguageModelV4CallOptions => ({
  prompt: [
    { role: 'system', content: SHARED },
    { role: 'user', content: [{ type: 'text', text: question }] },
  ],
  maxOutputTokens: 12,
  ...(sharing ? { providerOptions: { kvfabric: { sharing } } } : {}),
});

const promptOf = (question: string) =>
  fx.engine.renderConversation([
    { role: 'system', content: SHARED },
    { role: 'user', content: question },
  ]);

const textOf = (result: LanguageModelV4GenerateResult) => (result.content[0] as { text: string }).text;
const holders = () => fx.tiers.contextIds().filter((contextId) => contextId.startsWith('prefix-'));

describe('prefix sharing through the AI SDK provider, real model', () => {
  it("a run's first call takes its tenant's shared prefix, evaluates only the rest and replies as a whole prefill", async () => {
    const baseline = fx.pool.stats().usedBlocks;
    const first = 'Which file holds the allocator?';
    const second = 'Where is the checksum computed?';
    const prompt = promptOf(second);
    const shared = Math.floor(sharedPrefix(promptOf(first), prompt) / tokensPerBlock) * tokensPerBlock;
    expect(shared).toBeGreaterThanOrEqual(2 * tokensPerBlock);

    const a = await generate(runOf('acme', 'a'), ticket(first));
    expect(figuresOf(a)).toEqual({ reused: 0, evaluated: promptOf(first).length, shared: 0 });
    expect(holders()).toHaveLength(1);

    const b = await generate(runOf('acme', 'b'), ticket(second));
    expect(figuresOf(b)).toEqual({ reused: shared, evaluated: prompt.length - shared, shared });
    expect(b.usage.inputTokens).toMatchObject({ cacheRead: shared, noCache: prompt.length - shared });

    // Opted out: the whole prompt prefilled, nothing taken or published; the reply is the shared run's.
    const whole = await generate(runOf('acme', 'whole'), ticket(second, 'none'));
    expect(figuresOf(whole)).toEqual({ reused: 0, evaluated: prompt.length, shared: 0 });
    expect(textOf(whole)).toBe(textOf(b));

    // Another namespace (tenant) with the very same prompt: a miss, and the same reply.
    const other = await generate(runOf('globex', 'other'), ticket(second));
    expect(figuresOf(other)).toEqual({ reused: 0, evaluated: prompt.length, shared: 0 });
    expect(textOf(other)).toBe(textOf(b));

    // A third run of the tenant with the same prompt takes all of its full blocks.
    const all = Math.floor((prompt.length - 1) / tokensPerBlock) * tokensPerBlock;
    const c = await generate(runOf('acme', 'c'), ticket(second));
    expect(figuresOf(c)).toEqual({ reused: all, evaluated: prompt.length - all, shared: all });
    expect(textOf(c)).toBe(textOf(b));

    // The run that shared continues its own KV as any run does: the reply comes back as its ids.
    const followUp = (reply: LanguageModelV4GenerateResult): LanguageModelV4CallOptions => {
      const { prompt: asked } = ticket(second);
      const options = reply.content[0]!.providerMetadata!;
      return {
        prompt: [
          ...asked,
          { role: 'assistant', content: [{ type: 'text', text: textOf(reply), providerOptions: options }] },
          { role: 'user', content: [{ type: 'text', text: 'And why there?' }] },
        ],
        maxOutputTokens: 8,
      };
    };
    const b2 = await generate(runOf('acme', 'b'), followUp(b));
    const whole2 = await generate(runOf('acme', 'whole'), followUp(whole));
    expect(figuresOf(b2).shared).toBe(0);
    expect(figuresOf(b2).reused).toBeGreaterThan(prompt.length);
    expect(figuresOf(b2).evaluated).toBe(figuresOf(whole2).evaluated);
    expect(textOf(b2)).toBe(textOf(whole2));

    // The publisher goes first: the blocks stay for the runs still sharing them; the last one frees them.
    for (const id of ['a', 'b', 'c', 'whole']) expect(await fx.memory.release(runOf('acme', id))).toBe(true);
    expect(await fx.memory.release(runOf('globex', 'other'))).toBe(true);
    expect(holders()).toEqual([]);
    expect(fx.pool.stats().usedBlocks).toBe(baseline);
    expect(fx.pool.stats().sharedBlocks).toBe(0);
  });

  it('a sharing setting other than tenant or none is refused', async () => {
    expect(modelCallSharingOf(undefined)).toBe('tenant');
    expect(modelCallSharingOf({ kvfabric: { sharing: 'none' } })).toBe('none');
    expect(() => modelCallSharingOf({ kvfabric: { sharing: 'everyone' } })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    await expect(generate(runOf('acme', 'bad'), ticket('Anything?', 'everyone'))).rejects.toMatchObject({ type: 'INVALID_ARGUMENT' });
    expect(fx.tiers.has(modelCallContextId(runOf('acme', 'bad')))).toBe(false);
  });
});
