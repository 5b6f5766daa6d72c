// An AI SDK call as the engine's chat: tools described in the system message, tool calls and results in
// the ChatML tool convention, a remembered reply sent back as its token ids, and the reply parsed back
// into AI SDK content. A tool call the model writes parses back to the same call (property).
import type { LanguageModelV4FunctionTool, LanguageModelV4Prompt, SharedV4Warning } from '@ai-sdk/provider';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { assistantText, chatMessagesOf, replyContent, replyFormatOf } from '../../src/ai-sdk/prompt-messages';
import { FabricError } from '../../src/fabric/errors';

const SEARCH: LanguageModelV4FunctionTool = {
  type: 'function',
  name: 'search',
  description: 'Searches the library.',
  inputSchema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
};
const LOOKUP: LanguageModelV4FunctionTool = {
  type: 'function',
  name: 'lookup',
  inputSchema: { type: 'object', properties: { id: { type: 'integer' } }, required: ['id'] },
};
const ids = (i: number) => `call-${i}`;

describe('replyFormatOf', () => {
  it('asks for free text, a named tool call, or a call of any of several tools', () => {
    const warnings: SharedV4Warning[] = [];
    expect(replyFormatOf({}, warnings)).toEqual({ tools: [], mayCall: false });
    // Tools are described even when none may be called: a step's choice leaves the prompt as it was.
    expect(replyFormatOf({ tools: [SEARCH], toolChoice: { type: 'none' } }, warnings)).toEqual({ tools: [SEARCH], mayCall: false });
    expect(replyFormatOf({ tools: [SEARCH, LOOKUP] }, warnings)).toEqual({ tools: [SEARCH, LOOKUP], mayCall: true });
    const named = replyFormatOf({ tools: [SEARCH, LOOKUP], toolChoice: { type: 'tool', toolName: 'lookup' } }, warnings).structured!;
    expect(named.prefix).toBe('<tool_call>\n{"name": "lookup", "arguments": ');
    expect(named.schema).toBe(LOOKUP.inputSchema);
    const any = replyFormatOf({ tools: [SEARCH, LOOKUP], toolChoice: { type: 'required' } }, warnings).structured!;
    expect(any.prefix).toBe('<tool_call>\n');
    expect((any.schema as { oneOf: unknown[] }).oneOf).toHaveLength(2);
    expect(warnings).toEqual([]);
  });

  it('refuses a tool choice naming no tool of the call, and warns of provider tools', () => {
    expect(() => replyFormatOf({ tools: [SEARCH], toolChoice: { type: 'tool', toolName: 'delete' } }, [])).toThrow(FabricError);
    const warnings: SharedV4Warning[] = [];
    replyFormatOf({ tools: [{ type: 'provider', id: 'x.web', name: 'web', args: {} }] }, warnings);
    expect(warnings).toEqual([{ type: 'unsupported', feature: 'provider tool web' }]);
  });
});

describe('chatMessagesOf', () => {
  const prompt: LanguageModelV4Prompt = [
    { role: 'system', content: 'You research.' },
    { role: 'user', content: [{ type: 'text', text: 'Find kvfabric.' }] },
    { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'c1', toolName: 'search', input: { query: 'kvfabric' } }] },
    {
      role: 'tool',
      content: [{ type: 'tool-result', toolCallId: 'c1', toolName: 'search', output: { type: 'json', value: { hits: 2 } } }],
    },
  ];

  it('describes the tools in the system message and writes calls and results in the tool convention', () => {
    const warnings: SharedV4Warning[] = [];
    const messages = chatMessagesOf(prompt, { tools: [SEARCH], mayCall: true }, () => undefined, warnings);
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'user']);
    expect(messages[0]!.content).toMatch(/^You research\.\n\n# Tools\n[\s\S]*"name":"search"/);
    expect(messages[2]!.content).toBe('<tool_call>\n{"name": "search", "arguments": {"query":"kvfabric"}}\n</tool_call>');
    expect(messages[3]!.content).toBe('<tool_response>\n{"hits":2}\n</tool_response>');
    expect(warnings).toEqual([]);
  });

  it('opens with a system message of the tools when the prompt has none, and none without tools', () => {
    const [first] = chatMessagesOf(prompt.slice(1), { tools: [SEARCH], mayCall: true }, () => undefined, []);
    expect(first).toMatchObject({ role: 'system' });
    expect(first!.content).toMatch(/^# Tools/);
    expect(chatMessagesOf(prompt.slice(1, 2), { tools: [], mayCall: false }, () => undefined, [])[0]).toMatchObject({ role: 'user' });
  });

  it('sends a remembered reply as its token ids, found by the text it comes back as', () => {
    const asked: string[] = [];
    const remembered = Uint32Array.from([7, 8, 9]);
    const messages = chatMessagesOf(
      prompt,
      { tools: [SEARCH], mayCall: true },
      (text) => {
        asked.push(text);
        return remembered;
      },
      [],
    );
    expect(asked).toEqual([assistantText(prompt[2]!.content as Parameters<typeof assistantText>[0])]);
    expect(messages[2]!.content).toBe(remembered);
  });

  it('warns of the parts it leaves out', () => {
    const warnings: SharedV4Warning[] = [];
    chatMessagesOf(
      [{ role: 'user', content: [{ type: 'file', mediaType: 'image/png', data: { type: 'data', data: new Uint8Array(1) } }] }],
      { tools: [], mayCall: false },
      () => undefined,
      warnings,
    );
    expect(warnings).toEqual([{ type: 'unsupported', feature: 'file part in a user message' }]);
  });
});

describe('replyContent', () => {
  it('parses every call of a known tool the reply writes, and leaves the rest as text', () => {
    const text = 'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>';
    expect(replyContent(text, [SEARCH], ids)).toEqual([
      { type: 'text', text: 'Let me look.\n' },
      { type: 'tool-call', toolCallId: 'call-0', toolName: 'search', input: '{"query":"x"}' },
    ]);
    // Unknown tools and malformed JSON stay text.
    for (const bad of ['<tool_call>\n{"name": "rm", "arguments": {}}\n</tool_call>', '<tool_call>\n{"name": "search"\n</tool_call>']) {
      expect(replyContent(bad, [SEARCH], ids)).toEqual([{ type: 'text', text: bad }]);
    }
  });

  it('gives back the call a tool call was written from (property)', () => {
    const json = fc.jsonValue().filter((value) => value !== null && typeof value === 'object' && !Array.isArray(value));
    fc.assert(
      fc.property(fc.constantFrom(SEARCH, LOOKUP), json, fc.string(), (tool, input, before) => {
        const text = before + assistantText([{ type: 'tool-call', toolCallId: 'c', toolName: tool.name, input }]);
        const content = replyContent(text, [SEARCH, LOOKUP], ids);
        const call = content.find((part) => part.type === 'tool-call');
        expect(call).toMatchObject({ toolName: tool.name });
        expect(JSON.parse((call as { input: string }).input)).toEqual(JSON.parse(JSON.stringify(input)));
      }),
    );
  });
});
