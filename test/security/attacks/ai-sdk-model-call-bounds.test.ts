// Attacks on the size of an AI SDK model call (kvfabric's model provider, src/ai-sdk): whoever shapes the
// call (the workflow, or whatever text reaches its prompt) sends a prompt of megabytes, thousands of
// tools, a JSON-schema enum of 20,000 entries, or a schema nested ten thousand deep. Each is refused
// before the prompt is tokenized or a grammar compiled: OUT_OF_RANGE or INVALID_ARGUMENT, as a
// non-retryable ApplicationFailure (a RangeError would be retried by Temporal), quickly, storing nothing.
// A schema at the caps compiles in a few milliseconds. Real model, real pool and cold tier; the activity
// context is the SDK's own (MockActivityEnvironment), as the worker gives invokeModel.
import type { JSONSchema7, LanguageModelV4CallOptions, LanguageModelV4FunctionTool } from '@ai-sdk/provider';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { modelCallContextId } from '../../../src/ai-sdk/model-call-owner';
import { isFabricError } from '../../../src/fabric/errors';
import { openModelCalls, type ModelCallFixture } from '../../ai-sdk/model-call-fixture';

const RUN = { namespace: 'acme', workflowId: 'bounds', runId: '0193c0de-0000-7000-8000-0000000000b0' };
const ask = (text: string): LanguageModelV4CallOptions['prompt'] => [
  { role: 'system', content: 'You answer in one short sentence.' },
  { role: 'user', content: [{ type: 'text', text }] },
];

let fx: ModelCallFixture;

beforeAll(async () => {
  fx = await openModelCalls('ai-sdk-bounds');
}, 120_000);

afterAll(async () => fx?.close());

/** The call as its run's invokeModel makes it: the failure it ends in (undefined when it answers) and how long it took. */
async function attempt(options: LanguageModelV4CallOptions): Promise<{ err: unknown; ms: number }> {
  const started = performance.now();
  const err = await fx
    .as(RUN, () => fx.model.doGenerate(options))
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  return { err, ms: performance.now() - started };
}

/** Tokens the run's context holds (none when the call made none or left it empty). */
async function storedTokens(): Promise<number> {
  await fx.memory.settled();
  const id = modelCallContextId({ ...RUN, tenant: RUN.namespace });
  return fx.tiers.has(id) ? fx.tiers.contextStats(id).tokens : 0;
}

const tool = (name: string, inputSchema: LanguageModelV4FunctionTool['inputSchema']): LanguageModelV4FunctionTool => ({
  type: 'function',
  name,
  description: `Looks ${name} up.`,
  inputSchema,
});

describe('attacks on the size of an AI SDK model call', () => {
  it('a 1.9 MB prompt is OUT_OF_RANGE before it is tokenized, not a RangeError', async () => {
    const { err, ms } = await attempt({ prompt: ask('All work and no play. '.repeat(90_000)), maxOutputTokens: 4 });
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err).toMatchObject({ type: 'OUT_OF_RANGE', nonRetryable: true });
    expect((err as Error).message).toMatch(/context length/);
    expect(ms).toBeLessThan(1000); // tokenizing 1.9 MB alone takes about a second here
    expect(await storedTokens()).toBe(0);
  });

  it('3,000 tools are INVALID_ARGUMENT, not a RangeError', async () => {
    const tools = Array.from({ length: 3000 }, (_, i) =>
      tool(`lookup_${i}`, { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] }),
    );
    const { err } = await attempt({ prompt: ask('Find the bridge.'), tools, maxOutputTokens: 4 });
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err).toMatchObject({ type: 'INVALID_ARGUMENT', nonRetryable: true });
    expect((err as Error).message).toMatch(/3000 tools/);
    expect(await storedTokens()).toBe(0);
  });

  it('a JSON-schema enum of 20,000 entries is INVALID_ARGUMENT before a grammar is compiled', async () => {
    const schema: JSONSchema7 = {
      type: 'object',
      properties: { city: { enum: Array.from({ length: 20_000 }, (_, i) => `city-${i}`) } },
      required: ['city'],
    };
    const { err, ms } = await attempt({ prompt: ask('Pick a city.'), responseFormat: { type: 'json', schema }, maxOutputTokens: 4 });
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err).toMatchObject({ type: 'INVALID_ARGUMENT', nonRetryable: true });
    expect((err as Error).message).toMatch(/20000 enum entries/);
    expect(ms).toBeLessThan(1000);
    expect(await storedTokens()).toBe(0);
  }, 120_000);

  it('a tool whose schema is nested 10,000 deep is INVALID_ARGUMENT, not a RangeError', async () => {
    let deep: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 10_000; i++) deep = { type: 'object', properties: { inner: deep } };
    const { err } = await attempt({ prompt: ask('Go.'), tools: [tool('deep', deep as never)], maxOutputTokens: 4 });
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err).toMatchObject({ type: 'INVALID_ARGUMENT', nonRetryable: true });
    expect((err as Error).message).toMatch(/deep/);
  });

  it('the engine itself refuses a conversation over its context length, as text or as ids, with a typed error', () => {
    const cases = [
      [{ role: 'user' as const, content: 'x'.repeat(1_900_000) }],
      [{ role: 'assistant' as const, content: new Uint32Array(200_000).fill(42) }],
      Array.from({ length: 3000 }, () => ({ role: 'user' as const, content: 'A question of a few words, asked again.' })),
    ];
    for (const messages of cases) {
      let err: unknown;
      try {
        fx.engine.renderConversation(messages);
      } catch (e) {
        err = e;
      }
      expect(isFabricError(err, 'OUT_OF_RANGE'), String(err)).toBe(true);
    }
  });

  it('the engine refuses an over-sized schema before compiling it', async () => {
    const prompt = fx.engine.renderConversation([{ role: 'user', content: 'Pick a city.' }]);
    const schema = { enum: Array.from({ length: 20_000 }, (_, i) => `city-${i}`) };
    const err = await fx.engine
      .complete({
        key: 'bounds-engine',
        context: { tokens: new Uint32Array(0), writeKv: async () => 0 },
        prompt,
        generation: { maxTokens: 2 },
        structured: { prefix: '', schema, suffix: '' },
      })
      .catch((e: unknown) => e);
    expect(isFabricError(err, 'INVALID_ARGUMENT'), String(err)).toBe(true);
  });

  it('a call at the caps still answers', async () => {
    const schema: JSONSchema7 = {
      type: 'object',
      properties: { city: { enum: Array.from({ length: 256 }, (_, i) => `city-${i}`) } },
      required: ['city'],
    };
    const { err } = await attempt({ prompt: ask('Pick a city.'), responseFormat: { type: 'json', schema }, maxOutputTokens: 12 });
    expect(err).toBeUndefined();
  }, 120_000);
});
