// A reply's token ids carried in the response (its first part's provider metadata), as the AI SDK hands
// them back in the next prompt: the assistant message then goes to the model as those ids, even where
// the worker remembers none; a message whose text is not the one they were made for goes as its text;
// ids that are not token ids are a typed error. Then end to end with the real model: a run whose worker
// lost everything sends the very prompt ids of an uninterrupted run.
import type { LanguageModelV4CallOptions, LanguageModelV4Content, LanguageModelV4Prompt, SharedV4Warning } from '@ai-sdk/provider';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { carriedReplyIds, withReplyIds } from '../../src/ai-sdk/carried-reply-ids';
import { modelCallContextId } from '../../src/ai-sdk/model-call-owner';
import { modelCallNoteOf } from '../../src/ai-sdk/model-call-note';
import { assistantText, chatMessagesOf } from '../../src/ai-sdk/prompt-messages';
import { FabricError } from '../../src/fabric/errors';
import { openModelCalls, type ModelCallFixture } from './model-call-fixture';

type AssistantMessage = Extract<LanguageModelV4Prompt[number], { role: 'assistant' }>;

/** The assistant message the AI SDK makes of a response's content: each part's metadata as its provider options. */
function assistantMessageOf(content: LanguageModelV4Content[]): AssistantMessage {
  return {
    role: 'assistant',
    content: content.map((part) => {
      const providerOptions = 'providerMetadata' in part && part.providerMetadata ? { providerOptions: part.providerMetadata } : {};
      if (part.type === 'text') return { type: 'text', text: part.text, ...providerOptions };
      if (part.type === 'tool-call') {
        return {
          type: 'tool-call',
          toolCallId: part.toolCallId,
          toolName: part.toolName,
          input: JSON.parse(part.input),
          ...providerOptions,
        };
      }
      throw new Error(`no ${part.type} parts here`);
    }),
  };
}

const NO_FORMAT = { tools: [], mayCall: false };
const rememberNothing = () => undefined;

describe('carried reply ids', () => {
  it('send an assistant message as the ids it carries for its text, and as its text once edited (property)', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1 }), fc.array(fc.integer({ min: 0, max: 2 ** 32 - 1 }), { minLength: 1 }), (text, ids) => {
        const content = withReplyIds([{ type: 'text', text }], text, Uint32Array.from(ids));
        const message = assistantMessageOf(content);
        expect(Array.from(carriedReplyIds(message.content, assistantText(message.content)) ?? [])).toEqual(ids);
        const warnings: SharedV4Warning[] = [];
        const [sent] = chatMessagesOf([message], NO_FORMAT, rememberNothing, warnings);
        expect(Array.from(sent!.content as Uint32Array)).toEqual(ids);

        const edited: AssistantMessage = {
          ...message,
          content: [{ ...message.content[0]!, text: `${text}!` } as AssistantMessage['content'][number]],
        };
        expect(chatMessagesOf([edited], NO_FORMAT, rememberNothing, warnings)[0]!.content).toBe(`${text}!`);
      }),
    );
  });

  it('ride on a tool call when the reply is only calls', () => {
    const content = withReplyIds(
      [{ type: 'tool-call', toolCallId: 'c1', toolName: 'search', input: '{"query":"kv"}' }],
      '<tool_call>\n{"name": "search", "arguments": {"query":"kv"}}\n</tool_call>',
      Uint32Array.of(7, 8, 9),
    );
    const message = assistantMessageOf(content);
    const [sent] = chatMessagesOf([message], NO_FORMAT, rememberNothing, []);
    expect(Array.from(sent!.content as Uint32Array)).toEqual([7, 8, 9]);
  });

  it('still take the remembered lookup in conversation order', () => {
    const text = 'Same words.';
    const carried = assistantMessageOf(withReplyIds([{ type: 'text', text }], text, Uint32Array.of(1, 2)));
    const plain: AssistantMessage = { role: 'assistant', content: [{ type: 'text', text }] };
    const remembered = [Uint32Array.of(3, 4), Uint32Array.of(5, 6)];
    let next = 0;
    const sent = chatMessagesOf([carried, plain], NO_FORMAT, () => remembered[next++], []);
    // The second message gets the second remembered reply, not the first one the carried message skipped.
    expect(sent.map((m) => Array.from(m.content as Uint32Array))).toEqual([
      [1, 2],
      [5, 6],
    ]);
  });

  it('that are not token ids are INVALID_ARGUMENT', () => {
    const text = 'Hello.';
    for (const replyIds of [[-1], [1.5], ['7'], 'nope', [2 ** 32]]) {
      const message: AssistantMessage = {
        role: 'assistant',
        content: [{ type: 'text', text, providerOptions: { kvfabric: { replyIds, replyTextSha256: 'x' } as never } }],
      };
      expect(() => chatMessagesOf([message], NO_FORMAT, rememberNothing, [])).toThrow(FabricError);
      expect(() => chatMessagesOf([message], NO_FORMAT, rememberNothing, [])).toThrow(/replyIds/);
    }
  });
});

describe('carried reply ids with the real model', () => {
  let fx: ModelCallFixture;
  beforeAll(async () => {
    fx = await openModelCalls('carried-reply-ids');
  }, 120_000);
  afterAll(async () => fx?.close());

  const QUESTION: LanguageModelV4Prompt = [
    { role: 'system', content: 'You answer in one short sentence.' },
    { role: 'user', content: [{ type: 'text', text: 'Name a bridge in Paris.' }] },
  ];
  const FOLLOW_UP: LanguageModelV4Prompt[number] = { role: 'user', content: [{ type: 'text', text: 'And one in London?' }] };
  const call = (prompt: LanguageModelV4Prompt): LanguageModelV4CallOptions => ({ prompt, maxOutputTokens: 12 });
  const owner = (workflowId: string) => ({ namespace: 'acme', workflowId, runId: `${workflowId}-run` });
  const storedIds = (workflowId: string) => {
    const id = modelCallContextId({ ...owner(workflowId), tenant: 'acme' });
    return modelCallNoteOf(id, fx.tiers.attachment(id), fx.tiers.contextStats(id).tokens)!.tokens;
  };

  it('give a run whose worker lost its KV and note the prompt ids of an uninterrupted run', async () => {
    const first = await fx.as(owner('kept'), () => fx.model.doGenerate(call(QUESTION)));
    expect(first.content[0]!.providerMetadata?.kvfabric).toMatchObject({ replyIds: expect.any(Array) });
    const next = [...QUESTION, assistantMessageOf(first.content), FOLLOW_UP];
    const kept = await fx.as(owner('kept'), () => fx.model.doGenerate(call(next)));
    expect(kept.usage.inputTokens.cacheRead).toBeGreaterThan(0);

    // The same conversation on a run whose worker remembers nothing (as after a kill before its durable copy).
    const lost = await fx.as(owner('lost'), () => fx.model.doGenerate(call(next)));
    expect(lost.usage.inputTokens.cacheRead).toBe(0);
    expect(lost.usage.inputTokens.total).toBe(kept.usage.inputTokens.total);
    await fx.memory.settled();
    const prompt = kept.usage.inputTokens.total!;
    expect(storedIds('lost').slice(0, prompt)).toEqual(storedIds('kept').slice(0, prompt));
  });
});
