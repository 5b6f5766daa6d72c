// How a turn's message becomes tokens appended to a context, for models whose chat template is ChatML
// (SmolLM2, Qwen, ...): `<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n`, and after the
// reply `<|im_end|>\n`. Appending a whole formatted turn, never re-rendering the history, keeps a
// context's tokens a pure prefix of the next turn's, which is what lets kvfabric store only what a
// turn added. A completion's prompt (a whole conversation, rendered every call) uses the same blocks, so
// it shares its longest prefix with what was stored. Text is tokenized without special tokens, so a user
// cannot type `<|im_end|>` in; a message sent as token ids may hold none either (they go as their text).
// Tokens are appended one by one, never spread into a call's arguments: a long prompt would overflow the stack.
import type { LlamaModel, Token } from 'node-llama-cpp';

import { FabricError } from '../../fabric/errors';
import type { ChatMessage } from '../engine';

export interface ChatTurnFormat {
  /** Tokens fed before generating: [system block when first], user block, assistant prefix. */
  prompt(message: string, first: boolean, system: string | undefined): Token[];
  /**
   * A whole conversation, each message in its block (the template's own system prompt first when the
   * conversation brings none), then the assistant prefix: a completion's prompt. OUT_OF_RANGE as soon as
   * it passes `maxTokens`; the messages after are not tokenized.
   */
  conversation(messages: readonly ChatMessage[], maxTokens: number): Token[];
  /** Tokens that close the assistant's reply. */
  readonly close: Token[];
  /** The template's own system prompt for a first turn that brings none (ChatML templates often have one). */
  readonly defaultSystem: string | undefined;
}

/** `vocabularySize`: the engine's count (default: the tokenizer's token list); ids from it on are refused. */
export function chatMlTurnFormat(
  model: LlamaModel,
  vocabularySize: number = model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0,
): ChatTurnFormat {
  const template = String((model.fileInfo.metadata as { tokenizer?: { chat_template?: unknown } }).tokenizer?.chat_template ?? '');
  const special = (text: string) => model.tokenize(text, true);
  const start = special('<|im_start|>');
  const end = special('<|im_end|>');
  if (!template.includes('<|im_start|>') || start.length !== 1 || end.length !== 1) {
    throw new FabricError(
      'UNAVAILABLE',
      "the model's chat template is not ChatML; the llama engine formats turns as ChatML only (docs/engines.md)",
    );
  }
  const defaultSystem = /<\|im_start\|>system\n([^<]*)<\|im_end\|>/.exec(template)?.[1];
  const close = special('<|im_end|>\n');
  const isSpecial = specialTokenTest(model, vocabularySize);
  /** A message's tokens: its ids, unless they hold a special token, then its text (INVALID_ARGUMENT without one). */
  const contentTokens = ({ content, text }: ChatMessage): Token[] => {
    if (typeof content === 'string') return model.tokenize(content, false);
    const found = content.find(isSpecial);
    if (found === undefined) return Array.from(content) as Token[];
    if (typeof text === 'string') return model.tokenize(text, false);
    const shown = JSON.stringify(model.detokenize([found as Token], true));
    throw new FabricError(
      'INVALID_ARGUMENT',
      `a message's token ids hold the special token ${found} (${shown}), which no text tokenizes to`,
    );
  };
  const block = (message: ChatMessage): Token[] => special(`<|im_start|>${message.role}\n`).concat(contentTokens(message), close);
  return {
    prompt(message, first, system) {
      const sys = system ?? defaultSystem;
      const systemBlock = first && sys !== undefined ? special('<|im_start|>system\n').concat(model.tokenize(sys, false), close) : [];
      return systemBlock.concat(
        special('<|im_start|>user\n'),
        model.tokenize(message, false),
        special('<|im_end|>\n<|im_start|>assistant\n'),
      );
    },
    conversation(messages, maxTokens) {
      const tokens: Token[] = [];
      const append = (more: readonly Token[]) => {
        for (const token of more) tokens.push(token);
        if (tokens.length > maxTokens) {
          throw new FabricError('OUT_OF_RANGE', `the conversation is more than ${maxTokens} tokens, the context length`);
        }
      };
      if (messages[0]?.role !== 'system' && defaultSystem !== undefined) append(block({ role: 'system', content: defaultSystem }));
      for (const message of messages) {
        const { role, content, text } = message;
        if (role !== 'system' && role !== 'user' && role !== 'assistant') {
          throw new FabricError('INVALID_ARGUMENT', `a message's role is system, user or assistant, not ${String(role)}`);
        }
        if (typeof content !== 'string' && !(content instanceof Uint32Array)) {
          throw new FabricError('INVALID_ARGUMENT', "a message's content is a string or a Uint32Array of token ids");
        }
        if (text !== undefined && typeof text !== 'string') throw new FabricError('INVALID_ARGUMENT', "a message's text is a string");
        append(block(message));
      }
      append(special('<|im_start|>assistant\n'));
      return tokens;
    },
    close,
    defaultSystem,
  };
}

/**
 * Whether a token is special (a control or end-of-generation token, or one with no text of its own):
 * tokenizing text without special tokens never makes one. Ids outside the vocabulary are INVALID_ARGUMENT
 * here, before llama.cpp is asked about them. Answers are kept: a vocabulary is finite.
 */
function specialTokenTest(model: LlamaModel, vocabularySize: number): (id: number) => boolean {
  const known = new Map<number, boolean>();
  return (id) => {
    let special = known.get(id);
    if (special === undefined) {
      if (!Number.isInteger(id) || id < 0 || id >= vocabularySize) {
        throw new FabricError('INVALID_ARGUMENT', `token id ${id} is outside the vocabulary (${vocabularySize})`);
      }
      special = model.isSpecialToken(id as Token);
      known.set(id, special);
    }
    return special;
  };
}
