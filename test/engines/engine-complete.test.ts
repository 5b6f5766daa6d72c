// The llama engine's completions, with the real default model: a caller that sends the whole
// conversation every call (the AI SDK) has the engine continue the longest prefix it holds, hot or from
// kvfabric's pages, and evaluate only the rest; the reply is the one a fresh evaluation of the whole
// prompt gives (greedy). A prompt that departs from what is held continues only the shared prefix. A
// reply held to a JSON Schema is a tool call that parses. Bad calls are typed errors that change nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { ChatMessage, EngineCompletionResult, StoredContext } from '../../src/engines/engine';
import { LlamaEngine } from '../../src/engines/llama/llama-engine';
import { FabricError, NativeAllocator } from '../../src/fabric';

const GENERATION = { maxTokens: 16 };
const SYSTEM: ChatMessage = { role: 'system', content: 'You answer in one short sentence.' };

let engine: LlamaEngine;
let pool: NativeAllocator;

beforeAll(async () => {
  engine = await LlamaEngine.open({ contextLength: 512, hotContexts: 3 });
  pool = new NativeAllocator({ shape: engine.fingerprint.shape, blockCount: 128, backend: 'cpu' });
});

afterAll(async () => {
  await engine?.close();
  pool?.close();
});

const EMPTY: StoredContext = { tokens: new Uint32Array(0), writeKv: async () => 0 };

/** The whole conversation evaluated afresh under a key of its own: what a caller with no KV kept gets. */
async function fresh(messages: ChatMessage[]): Promise<EngineCompletionResult> {
  const key = `fresh-${Math.random()}`;
  try {
    return await engine.complete({ key, context: EMPTY, prompt: engine.renderConversation(messages), generation: GENERATION });
  } finally {
    await engine.release(key);
  }
}

async function expectCode(promise: Promise<unknown>, code: string): Promise<void> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FabricError);
  expect((err as FabricError).code).toBe(code);
}

describe('LlamaEngine.complete', () => {
  it('continues its hot prefix, evaluates only the rest, and replies as a fresh evaluation does', async () => {
    const first: ChatMessage[] = [SYSTEM, { role: 'user', content: 'Name a color.' }];
    const one = await engine.complete({ key: 'hot', context: EMPTY, prompt: engine.renderConversation(first), generation: GENERATION });
    expect(one).toMatchObject({ resumedFrom: 'empty', reusedTokens: 0 });
    expect(one.evaluatedTokens).toBe(engine.renderConversation(first).length);

    // The reply goes back as the ids it was generated as: the whole first call is a prefix of the second.
    const second: ChatMessage[] = [...first, { role: 'assistant', content: one.reply }, { role: 'user', content: 'Name a fruit.' }];
    const prompt = engine.renderConversation(second);
    expect(Array.from(prompt.subarray(0, one.tokens.length))).toEqual(Array.from(one.tokens));
    const two = await engine.complete({ key: 'hot', context: EMPTY, prompt, generation: GENERATION });
    expect(two).toMatchObject({ resumedFrom: 'hot', reusedTokens: one.tokens.length, evaluatedTokens: prompt.length - one.tokens.length });

    const whole = await fresh(second);
    expect(whole.evaluatedTokens).toBe(prompt.length);
    expect(two.text).toBe(whole.text);
    expect(Array.from(two.reply)).toEqual(Array.from(whole.reply));
  });

  it('continues only the prefix a departing prompt shares, and replies as a fresh evaluation does', async () => {
    const first: ChatMessage[] = [SYSTEM, { role: 'user', content: 'Name a city in France.' }];
    const one = await engine.complete({ key: 'edit', context: EMPTY, prompt: engine.renderConversation(first), generation: GENERATION });
    // Another system prompt: the two share the system block's opening tokens at most.
    const edited: ChatMessage[] = [
      { role: 'system', content: 'You answer in French.' },
      { role: 'user', content: 'Name a city in France.' },
    ];
    const prompt = engine.renderConversation(edited);
    let shared = 0;
    while (one.tokens[shared] === prompt[shared]) shared++;
    expect(shared).toBeLessThan(10);
    const two = await engine.complete({ key: 'edit', context: EMPTY, prompt, generation: GENERATION });
    expect(two).toMatchObject({ resumedFrom: 'hot', reusedTokens: shared, evaluatedTokens: prompt.length - shared });
    expect(two.text).toBe((await fresh(edited)).text);
  });

  it('continues a prefix from the pages when the engine let go, and replies as a fresh evaluation does', async () => {
    const first: ChatMessage[] = [SYSTEM, { role: 'user', content: 'Name an animal.' }];
    const one = await engine.complete({ key: 'paged', context: EMPTY, prompt: engine.renderConversation(first), generation: GENERATION });
    const saved = await engine.save('paged', 0);
    const handle = pool.createContext(1);
    pool.append(handle, saved.kv);
    await engine.release('paged');

    const second: ChatMessage[] = [...first, { role: 'assistant', content: one.reply }, { role: 'user', content: 'Name a bird.' }];
    const prompt = engine.renderConversation(second);
    const stored = one.tokens.length;
    let loads = 0;
    const context: StoredContext = {
      tokens: prompt.slice(0, stored),
      fingerprint: engine.fingerprint,
      writeKv: async (file, pieces) => {
        loads++;
        return pool.writePlaneMajorAsync(handle, file, 0, stored, pieces);
      },
    };
    const two = await engine.complete({ key: 'paged', context, prompt, generation: GENERATION });
    expect(loads).toBe(1);
    expect(two).toMatchObject({ resumedFrom: 'stored', reusedTokens: stored, evaluatedTokens: prompt.length - stored });
    expect(two.text).toBe((await fresh(second)).text);
    pool.release(handle);
  });

  it('holds a structured reply to its JSON Schema between a forced prefix and suffix', async () => {
    const schema = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome', 'Oslo'] } }, required: ['city'] };
    const structured = { prefix: '<tool_call>\n{"name": "weather", "arguments": ', schema, suffix: '}\n</tool_call>' };
    const messages: ChatMessage[] = [SYSTEM, { role: 'user', content: 'What is the weather in the capital of Italy?' }];
    const result = await engine.complete({
      key: 'tool',
      context: EMPTY,
      prompt: engine.renderConversation(messages),
      generation: { maxTokens: 24 },
      structured,
    });
    expect(result.finish).toBe('stop');
    expect(result.text.startsWith(structured.prefix) && result.text.endsWith(structured.suffix)).toBe(true);
    const args = JSON.parse(result.text.slice(structured.prefix.length, -structured.suffix.length)) as { city: string };
    expect(schema.properties.city.enum).toContain(args.city);
    await engine.release('tool');
  });

  it('refuses bad calls with typed errors and keeps its hot copy', async () => {
    const messages: ChatMessage[] = [SYSTEM, { role: 'user', content: 'Say yes.' }];
    const prompt = engine.renderConversation(messages);
    const one = await engine.complete({ key: 'bad', context: EMPTY, prompt, generation: { maxTokens: 4 } });
    const next = engine.renderConversation([...messages, { role: 'assistant', content: one.reply }, { role: 'user', content: 'Again.' }]);

    // A stored context that is not a prefix of the prompt, or is all of it.
    const notPrefix: StoredContext = { ...EMPTY, tokens: Uint32Array.from([next[0]! + 1]), fingerprint: engine.fingerprint };
    await expectCode(engine.complete({ key: 'bad', context: notPrefix, prompt: next }), 'INVALID_ARGUMENT');
    const whole: StoredContext = { ...EMPTY, tokens: next.slice(), fingerprint: engine.fingerprint };
    await expectCode(engine.complete({ key: 'bad', context: whole, prompt: next }), 'INVALID_ARGUMENT');
    // A token outside the vocabulary, a prompt past the context length, a schema that is no grammar.
    await expectCode(engine.complete({ key: 'bad', context: EMPTY, prompt: Uint32Array.from([...next, 2 ** 31]) }), 'INVALID_ARGUMENT');
    await expectCode(engine.complete({ key: 'bad', context: EMPTY, prompt: new Uint32Array(600).fill(next[1]!) }), 'OUT_OF_RANGE');
    await expectCode(
      engine.complete({ key: 'bad', context: EMPTY, prompt: next, structured: { prefix: '', schema: { oneOf: 3 }, suffix: '' } }),
      'INVALID_ARGUMENT',
    );
    expect(() => engine.renderConversation([{ role: 'tool' as 'user', content: 'x' }])).toThrow(FabricError);

    // Nothing was lost: the hot copy continues as before.
    const two = await engine.complete({ key: 'bad', context: EMPTY, prompt: next, generation: { maxTokens: 4 } });
    expect(two).toMatchObject({ resumedFrom: 'hot', reusedTokens: one.tokens.length });
    await engine.release('bad');
  });
});
