// kvfabric's language model streams: a text reply arrives in pieces as the model generates it, which
// joined are the reply a call without streaming gives (greedy), and its usage is the same; a reply held to
// a tool call comes whole, as a tool-call part; the text ends with the reply's token ids; a failure errors
// the stream, typed. Real model; the activity context is the SDK's own.
import type { LanguageModelV4CallOptions, LanguageModelV4StreamPart } from '@ai-sdk/provider';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { openModelCalls, type ModelCallFixture } from './model-call-fixture';

let fx: ModelCallFixture;

beforeAll(async () => {
  fx = await openModelCalls('ai-sdk-streaming');
}, 120_000);

afterAll(async () => fx?.close());

const run = (id: string) => ({ namespace: 'default', workflowId: `stream-${id}`, runId: `run-${id}` });

async function partsOf(options: LanguageModelV4CallOptions, id: string): Promise<LanguageModelV4StreamPart[]> {
  return fx.as(run(id), async () => {
    const { stream } = await fx.model.doStream(options);
    const parts: LanguageModelV4StreamPart[] = [];
    for await (const part of stream) parts.push(part);
    return parts;
  });
}

describe('streaming', () => {
  const question: LanguageModelV4CallOptions = {
    prompt: [{ role: 'user', content: [{ type: 'text', text: 'Describe the sea in two sentences.' }] }],
    maxOutputTokens: 24,
  };

  it('streams a text reply in pieces that join to the reply a plain call gives', async () => {
    const parts = await partsOf(question, 'a');
    expect(parts[0]).toMatchObject({ type: 'stream-start' });
    expect(parts.at(-1)).toMatchObject({ type: 'finish' });
    const deltas = parts.filter((part) => part.type === 'text-delta').map((part) => part.delta);
    expect(deltas.length).toBeGreaterThan(3);
    const whole = await fx.as(run('b'), () => fx.model.doGenerate(question));
    expect(deltas.join('')).toBe((whole.content[0] as { text: string }).text);
    const finish = parts.at(-1) as Extract<LanguageModelV4StreamPart, { type: 'finish' }>;
    expect(finish.usage).toEqual(whole.usage);
  });

  it('gives a reply held to a tool call whole, as a tool-call part', async () => {
    const parts = await partsOf(
      {
        ...question,
        tools: [
          {
            type: 'function',
            name: 'weather',
            inputSchema: { type: 'object', properties: { sea: { type: 'string', enum: ['north', 'baltic'] } }, required: ['sea'] },
          },
        ],
        toolChoice: { type: 'tool', toolName: 'weather' },
      },
      'c',
    );
    expect(parts.filter((part) => part.type === 'text-delta')).toEqual([]);
    expect(parts.find((part) => part.type === 'tool-call')).toMatchObject({ toolName: 'weather' });
    expect(parts.at(-1)).toMatchObject({ type: 'finish', finishReason: { unified: 'tool-calls' } });
  });

  it("ends a streamed text with the reply's token ids, as a plain call's text part carries them", async () => {
    const parts = await partsOf(question, 'd');
    const end = parts.find((part) => part.type === 'text-end');
    const whole = await fx.as(run('e'), () => fx.model.doGenerate(question));
    const { replyMac, ...streamed } = end?.providerMetadata?.kvfabric ?? {};
    const { replyMac: _, ...plain } = whole.content[0]!.providerMetadata?.kvfabric ?? {};
    expect(streamed).toEqual(plain);
    expect(streamed).toMatchObject({ replyIds: expect.any(Array) });
    // Sealed for the run that streamed it (the MAC covers the run, so the two calls' MACs differ).
    const text = (whole.content[0] as { text: string }).text;
    const carried = [{ providerOptions: { kvfabric: { ...streamed, replyMac } } }];
    expect(fx.memory.carriedReplies.carriedReplyIds({ ...run('d'), tenant: run('d').namespace }, carried, text)).toBeDefined();
  });

  it('fails the stream with the typed, non-retryable failure a plain call throws', async () => {
    const tools: LanguageModelV4CallOptions['tools'] = [{ type: 'function', name: 'weather', inputSchema: { type: 'object' } }];
    const refused = partsOf({ ...question, tools, toolChoice: { type: 'tool', toolName: 'nowhere' } }, 'f');
    await expect(refused).rejects.toBeInstanceOf(ApplicationFailure);
    await expect(refused).rejects.toMatchObject({ type: 'INVALID_ARGUMENT', nonRetryable: true });
  });
});
