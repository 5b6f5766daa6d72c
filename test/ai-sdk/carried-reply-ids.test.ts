// A reply's token ids carried in the response (its first part's provider metadata), as the AI SDK hands
// them back in the next prompt: the assistant message then goes to the model as those ids, even where
// the worker remembers none; a message whose text is not the one they were made for, or that another run
// sends, or whose MAC no key of the ring made, goes as its text; ids that are not token ids are a typed
// error. Then end to end with the real model: a run whose worker lost everything sends the very prompt
// ids of an uninterrupted run.
import type { LanguageModelV4CallOptions, LanguageModelV4Content, LanguageModelV4Prompt, SharedV4Warning } from '@ai-sdk/provider';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { CarriedReplyIds, type PromptPart } from '../../src/ai-sdk/carried-reply-ids';
import { modelCallContextId, type ModelCallOwner } from '../../src/ai-sdk/model-call-owner';
import { modelCallNoteOf } from '../../src/ai-sdk/model-call-note';
import { assistantText, chatMessagesOf } from '../../src/ai-sdk/prompt-messages';
import { FabricError } from '../../src/fabric/errors';
import { KeyRing } from '../../src/tiers/cold/key-ring';
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
const RING = new KeyRing(
  [
    { id: 'old', key: Buffer.alloc(32, 1) },
    { id: 'new', key: Buffer.alloc(32, 2) },
  ],
  'new',
);
const sealer = new CarriedReplyIds(RING);
const RUN: ModelCallOwner = { namespace: 'acme', workflowId: 'w', runId: 'r1', tenant: 'acme' };
const withReplyIds = (content: LanguageModelV4Content[], text: string, ids: Uint32Array, owner = RUN) =>
  sealer.withReplyIds(owner, content, text, ids);
const carriedIn =
  (owner: ModelCallOwner, keys = sealer) =>
  (parts: readonly PromptPart[], text: string) =>
    keys.carriedReplyIds(owner, parts, text);
const carriedReplyIds = (parts: readonly PromptPart[], text: string) => sealer.carriedReplyIds(RUN, parts, text);

describe('carried reply ids', () => {
  it('send an assistant message as the ids it carries for its text, and as its text once edited (property)', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1 }), fc.array(fc.integer({ min: 0, max: 2 ** 32 - 1 }), { minLength: 1 }), (text, ids) => {
        const content = withReplyIds([{ type: 'text', text }], text, Uint32Array.from(ids));
        const message = assistantMessageOf(content);
        expect(Array.from(carriedReplyIds(message.content, assistantText(message.content)) ?? [])).toEqual(ids);
        const warnings: SharedV4Warning[] = [];
        const [sent] = chatMessagesOf([message], NO_FORMAT, rememberNothing, warnings, carriedIn(RUN));
        expect(Array.from(sent!.content as Uint32Array)).toEqual(ids);

        const edited: AssistantMessage = {
          ...message,
          content: [{ ...message.content[0]!, text: `${text}!` } as AssistantMessage['content'][number]],
        };
        expect(chatMessagesOf([edited], NO_FORMAT, rememberNothing, warnings, carriedIn(RUN))[0]!.content).toBe(`${text}!`);
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
    const [sent] = chatMessagesOf([message], NO_FORMAT, rememberNothing, [], carriedIn(RUN));
    expect(Array.from(sent!.content as Uint32Array)).toEqual([7, 8, 9]);
  });

  it('still take the remembered lookup in conversation order', () => {
    const text = 'Same words.';
    const carried = assistantMessageOf(withReplyIds([{ type: 'text', text }], text, Uint32Array.of(1, 2)));
    const plain: AssistantMessage = { role: 'assistant', content: [{ type: 'text', text }] };
    const remembered = [Uint32Array.of(3, 4), Uint32Array.of(5, 6)];
    let next = 0;
    const sent = chatMessagesOf([carried, plain], NO_FORMAT, () => remembered[next++], [], carriedIn(RUN));
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
        content: [{ type: 'text', text, providerOptions: { kvfabric: { replyIds, replyKeyId: 'new', replyMac: 'x' } as never } }],
      };
      expect(() => chatMessagesOf([message], NO_FORMAT, rememberNothing, [], carriedIn(RUN))).toThrow(FabricError);
      expect(() => chatMessagesOf([message], NO_FORMAT, rememberNothing, [], carriedIn(RUN))).toThrow(/replyIds/);
    }
  });
});

describe('carried reply ids are bound to the run, the text, the ids and the workers’ keys', () => {
  const text = 'The Pont Neuf.';
  const ids = Uint32Array.of(504, 24829, 2993);
  const carried = (content: LanguageModelV4Content[]) => assistantMessageOf(content).content;
  const metadata = (content: LanguageModelV4Content[]) => content[0]!.providerMetadata!.kvfabric as Record<string, unknown>;

  it('hold a MAC naming its master key, not the text or a hash of it', () => {
    const sealed = metadata(withReplyIds([{ type: 'text', text }], text, ids));
    expect(Object.keys(sealed).sort()).toEqual(['replyIds', 'replyKeyId', 'replyMac']);
    expect(sealed.replyKeyId).toBe('new');
    expect(Buffer.from(sealed.replyMac as string, 'base64url')).toHaveLength(32);
  });

  it('count only in the run they were made in', () => {
    const parts = carried(withReplyIds([{ type: 'text', text }], text, ids));
    expect(Array.from(carriedIn(RUN)(parts, text) ?? [])).toEqual(Array.from(ids));
    for (const other of [{ runId: 'r2' }, { workflowId: 'w2' }, { namespace: 'rival', tenant: 'rival' }]) {
      expect(carriedIn({ ...RUN, ...other })(parts, text)).toBeUndefined();
    }
  });

  it('count for no other ids, and under no other key', () => {
    const sealed = metadata(withReplyIds([{ type: 'text', text }], text, ids));
    const swapped = [{ providerOptions: { kvfabric: { ...sealed, replyIds: [504, 24829, 2994] } } }];
    expect(carriedReplyIds(swapped, text)).toBeUndefined();
    const renamed = [{ providerOptions: { kvfabric: { ...sealed, replyKeyId: 'old' } } }];
    expect(carriedReplyIds(renamed, text)).toBeUndefined();
    const unknown = [{ providerOptions: { kvfabric: { ...sealed, replyKeyId: 'nobody' } } }];
    expect(carriedReplyIds(unknown, text)).toBeUndefined();
    const otherWorkers = new CarriedReplyIds(new KeyRing([{ id: 'new', key: Buffer.alloc(32, 9) }], 'new'));
    expect(carriedIn(RUN, otherWorkers)(carried(withReplyIds([{ type: 'text', text }], text, ids)), text)).toBeUndefined();
  });

  it('made under a key since rotated out of the active slot still count while it is in the ring', () => {
    const before = new CarriedReplyIds(RING.withActive('old'));
    const parts = carried(before.withReplyIds(RUN, [{ type: 'text', text }], text, ids));
    expect(Array.from(carriedReplyIds(parts, text) ?? [])).toEqual(Array.from(ids));
  });

  it('from before ids were sealed (a SHA-256 of the text) go as their text', () => {
    const legacy = [{ providerOptions: { kvfabric: { replyIds: Array.from(ids), replyTextSha256: 'ab'.repeat(32) } } }];
    expect(carriedReplyIds(legacy, text)).toBeUndefined();
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

  it('give a run whose worker lost its KV and note the prompt ids it had before', async () => {
    const first = await fx.as(owner('kept'), () => fx.model.doGenerate(call(QUESTION)));
    expect(first.content[0]!.providerMetadata?.kvfabric).toMatchObject({ replyIds: expect.any(Array) });
    const next = [...QUESTION, assistantMessageOf(first.content), FOLLOW_UP];
    const kept = await fx.as(owner('kept'), () => fx.model.doGenerate(call(next)));
    expect(kept.usage.inputTokens.cacheRead).toBeGreaterThan(0);
    await fx.memory.settled();
    const prompt = kept.usage.inputTokens.total!;
    const before = storedIds('kept').slice(0, prompt);

    // The same call again, on a worker that remembers nothing of the run (as after a kill before its durable copy).
    expect(await fx.memory.release({ ...owner('kept'), tenant: 'acme' })).toBe(true);
    const again = await fx.as(owner('kept'), () => fx.model.doGenerate(call(next)));
    expect(again.usage.inputTokens.cacheRead).toBe(0);
    expect(again.usage.inputTokens.total).toBe(prompt);
    await fx.memory.settled();
    expect(storedIds('kept').slice(0, prompt)).toEqual(before);
  });
});
