// An AI SDK call as the engine's chat: the prompt's messages, the tools described in the system message,
// and a tool call written the way ChatML tool models (Hermes, Qwen) write one:
//   <tool_call>\n{"name": "search", "arguments": {...}}\n</tool_call>
// A tool's result goes back as a user message in <tool_response> tags. A reply the model made comes back
// in the next call's prompt as the token ids it was generated as (carried in the reply's provider
// metadata, or remembered by the worker and found by its text), so its KV is continued instead of
// evaluated again.
import type {
  LanguageModelV4CallOptions,
  LanguageModelV4Content,
  LanguageModelV4FunctionTool,
  LanguageModelV4Prompt,
  LanguageModelV4ToolResultOutput,
  SharedV4Warning,
} from '@ai-sdk/provider';

import type { ChatMessage, StructuredReply } from '../engines/engine';
import { checkJsonSchemaBounds } from '../engines/json-schema-bounds';
import { FabricError } from '../fabric/errors';
import type { PromptPart } from './carried-reply-ids';

type AssistantPart = Extract<LanguageModelV4Prompt[number], { role: 'assistant' }>['content'][number];

const TOOL_CALL_START = '<tool_call>';
const TOOL_CALL_END = '</tool_call>';
const TOOL_CALL_OPEN = `${TOOL_CALL_START}\n`;
const TOOL_CALL_CLOSE = `\n${TOOL_CALL_END}`;
/**
 * Tools one call may describe: each is text in the system message, and toolChoice 'required' among several
 * makes one schema of them all, compiled into a grammar (docs/ai-sdk.md, "Limits").
 */
export const MAX_TOOLS = 64;

/** How the model must answer: the tools the prompt describes, whether it may call them, and a call held to a schema. */
export interface ReplyFormat {
  /** Described in the system message whatever the tool choice, so a step's choice does not change the prompt. */
  tools: LanguageModelV4FunctionTool[];
  /** False for toolChoice 'none': the reply is text, even one that looks like a call. */
  mayCall: boolean;
  structured?: StructuredReply;
}

/**
 * The call's function tools and the reply its tool choice asks for; warnings for what is left out.
 * INVALID_ARGUMENT for more than MAX_TOOLS tools, or a schema past JSON_SCHEMA_LIMITS: checked before
 * anything is rendered, tokenized or compiled.
 */
export function replyFormatOf(options: Pick<LanguageModelV4CallOptions, 'tools' | 'toolChoice'>, warnings: SharedV4Warning[]): ReplyFormat {
  const tools: LanguageModelV4FunctionTool[] = [];
  const given = options.tools ?? [];
  if (given.length > MAX_TOOLS) {
    throw new FabricError('INVALID_ARGUMENT', `a call has ${given.length} tools; kvfabric's model takes at most ${MAX_TOOLS}`);
  }
  for (const tool of given) {
    if (tool.type !== 'function') {
      warnings.push({ type: 'unsupported', feature: `provider tool ${tool.name}` });
      continue;
    }
    checkJsonSchemaBounds(tool.inputSchema, `the input schema of tool ${JSON.stringify(String(tool.name).slice(0, 64))}`);
    tools.push(tool);
  }
  const choice = options.toolChoice ?? { type: 'auto' };
  if (tools.length === 0 || choice.type === 'none') return { tools, mayCall: false };
  if (choice.type === 'auto') return { tools, mayCall: true };
  if (choice.type === 'tool') {
    const tool = tools.find((t) => t.name === choice.toolName);
    if (!tool) throw new FabricError('INVALID_ARGUMENT', `toolChoice names ${choice.toolName}, which is not among the call's tools`);
    return { tools, mayCall: true, structured: oneToolCall(tool) };
  }
  // 'required': one tool is called by name; among several, the model picks the name too.
  if (tools.length === 1) return { tools, mayCall: true, structured: oneToolCall(tools[0]!) };
  const schema = {
    oneOf: tools.map((tool) => ({
      type: 'object',
      properties: { name: { const: tool.name }, arguments: tool.inputSchema },
      required: ['name', 'arguments'],
      additionalProperties: false,
    })),
  };
  checkJsonSchemaBounds(schema, `the schema toolChoice 'required' makes of ${tools.length} tools (name one of them instead)`);
  return { tools, mayCall: true, structured: { prefix: TOOL_CALL_OPEN, schema, suffix: TOOL_CALL_CLOSE } };
}

function oneToolCall(tool: LanguageModelV4FunctionTool): StructuredReply {
  return {
    prefix: `${TOOL_CALL_OPEN}{"name": ${JSON.stringify(tool.name)}, "arguments": `,
    schema: tool.inputSchema,
    suffix: `}${TOOL_CALL_CLOSE}`,
  };
}

/**
 * The prompt as chat messages. An assistant message goes as the token ids it was generated as: those it
 * carries for its text (`carried`: carried-reply-ids.ts checks them; by default none count), else those
 * `replyIds(text)` gives, when this context remembers a reply with that text; else as its text. Ids go
 * with their text, which the engine sends instead when they hold a special token.
 */
export function chatMessagesOf(
  prompt: LanguageModelV4Prompt,
  format: ReplyFormat,
  replyIds: (text: string) => Uint32Array | undefined,
  warnings: SharedV4Warning[],
  carried: (parts: readonly PromptPart[], text: string) => Uint32Array | undefined = () => undefined,
): ChatMessage[] {
  if (!Array.isArray(prompt)) throw new FabricError('INVALID_ARGUMENT', 'a call needs its prompt as an array of messages');
  const messages: ChatMessage[] = [];
  const toolBlock = format.tools.length > 0 ? toolsBlock(format.tools) : undefined;
  if (toolBlock && prompt[0]?.role !== 'system') messages.push({ role: 'system', content: toolBlock });
  for (const message of prompt) {
    switch (message.role) {
      case 'system': {
        const first = messages.length === 0;
        messages.push({ role: 'system', content: first && toolBlock ? `${message.content}\n\n${toolBlock}` : message.content });
        break;
      }
      case 'user': {
        const texts: string[] = [];
        for (const part of message.content) {
          if (part.type === 'text') texts.push(part.text);
          else warnings.push({ type: 'unsupported', feature: `${part.type} part in a user message` });
        }
        messages.push({ role: 'user', content: texts.join('\n') });
        break;
      }
      case 'assistant': {
        const text = assistantText(message.content, warnings);
        // Looked up whether or not the message carries its ids: the lookup goes in conversation order.
        const remembered = replyIds(text);
        const ids = carried(message.content, text) ?? remembered;
        messages.push(ids ? { role: 'assistant', content: ids, text } : { role: 'assistant', content: text });
        break;
      }
      case 'tool': {
        const results: string[] = [];
        for (const part of message.content) {
          if (part.type === 'tool-result') results.push(`<tool_response>\n${toolOutputText(part.output)}\n</tool_response>`);
          else warnings.push({ type: 'unsupported', feature: `${part.type} part in a tool message` });
        }
        messages.push({ role: 'user', content: results.join('\n') });
        break;
      }
      default:
        throw new FabricError(
          'INVALID_ARGUMENT',
          `a prompt message's role is system, user, assistant or tool, not ${String((message as { role: unknown }).role)}`,
        );
    }
  }
  return messages;
}

/** An assistant message's text as the model writes it: its text, then its tool calls. */
export function assistantText(parts: readonly AssistantPart[], warnings?: SharedV4Warning[]): string {
  let text = '';
  for (const part of parts) {
    if (part.type === 'text') text += part.text;
    else if (part.type === 'tool-call') text += toolCallText(part.toolName, part.input);
    else warnings?.push({ type: 'unsupported', feature: `${part.type} part in an assistant message` });
  }
  return text;
}

function toolCallText(name: string, input: unknown): string {
  const args = typeof input === 'string' ? input : JSON.stringify(input ?? {});
  return `${TOOL_CALL_OPEN}{"name": ${JSON.stringify(name)}, "arguments": ${args}}${TOOL_CALL_CLOSE}`;
}

/**
 * The reply as AI SDK content: its text outside tool calls, and each well-formed call of a known tool
 * (`ids(i)` names the i-th). A call that does not parse stays text.
 */
export function replyContent(
  text: string,
  tools: readonly LanguageModelV4FunctionTool[],
  ids: (index: number) => string,
): LanguageModelV4Content[] {
  const content: LanguageModelV4Content[] = [];
  let plain = '';
  let from = 0;
  for (let open = text.indexOf(TOOL_CALL_START); open !== -1; open = text.indexOf(TOOL_CALL_START, open + 1)) {
    if (open < from) continue;
    const found = toolCallAt(text, open + TOOL_CALL_START.length, tools);
    if (!found) continue;
    plain += text.slice(from, open);
    from = found.end;
    content.push({ type: 'tool-call', toolCallId: ids(content.length), toolName: found.name, input: JSON.stringify(found.arguments) });
  }
  plain += text.slice(from);
  if (plain.trim() !== '' || content.length === 0) content.unshift({ type: 'text', text: plain });
  return content;
}

/**
 * The call whose JSON starts at `at`, closed by the first </tool_call> after which it parses (an argument
 * may itself contain the closing tag); undefined when none does or it names no tool of the call.
 */
function toolCallAt(
  text: string,
  at: number,
  tools: readonly LanguageModelV4FunctionTool[],
): { name: string; arguments: unknown; end: number } | undefined {
  for (let close = text.indexOf(TOOL_CALL_END, at); close !== -1; close = text.indexOf(TOOL_CALL_END, close + 1)) {
    let call: unknown;
    try {
      call = JSON.parse(text.slice(at, close));
    } catch {
      continue;
    }
    if (typeof call !== 'object' || call === null) return undefined;
    const { name, arguments: args } = call as { name?: unknown; arguments?: unknown };
    if (typeof name !== 'string' || !tools.some((tool) => tool.name === name)) return undefined;
    return { name, arguments: args ?? {}, end: close + TOOL_CALL_END.length };
  }
  return undefined;
}

function toolOutputText(output: LanguageModelV4ToolResultOutput): string {
  switch (output.type) {
    case 'text':
    case 'error-text':
      return output.value;
    case 'json':
    case 'error-json':
      return JSON.stringify(output.value);
    case 'execution-denied':
      return JSON.stringify({ denied: output.reason ?? true });
    case 'content':
      return output.value.map((part) => (part.type === 'text' ? part.text : `[${part.type}]`)).join('\n');
    default:
      return JSON.stringify(output);
  }
}

function toolsBlock(tools: readonly LanguageModelV4FunctionTool[]): string {
  const signatures = tools
    .map((tool) =>
      JSON.stringify({
        type: 'function',
        function: { name: tool.name, description: tool.description ?? '', parameters: tool.inputSchema },
      }),
    )
    .join('\n');
  return [
    '# Tools',
    '',
    'You may call one or more functions to assist with the user query.',
    '',
    'You are provided with function signatures within <tools></tools> XML tags:',
    `<tools>\n${signatures}\n</tools>`,
    '',
    'For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:',
    `${TOOL_CALL_OPEN}{"name": <function-name>, "arguments": <args-json-object>}${TOOL_CALL_CLOSE}`,
  ].join('\n');
}
