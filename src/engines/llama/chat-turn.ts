// How a turn's message becomes tokens appended to a context, for models whose chat template is ChatML
// (SmolLM2, Qwen, ...): `<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n`, and after the
// reply `<|im_end|>\n`. Appending a whole formatted turn, never re-rendering the history, keeps a
// context's tokens a pure prefix of the next turn's, which is what lets kvfabric store only what a
// turn added. A completion's prompt (a whole conversation, rendered every call) uses the same blocks, so
// it shares its longest prefix with what was stored. Text is tokenized without special tokens, so a user
// cannot type `<|im_end|>` in.
import type { LlamaModel, Token } from 'node-llama-cpp';

import { FabricError } from '../../fabric/errors';
import type { ChatMessage } from '../engine';

export interface ChatTurnFormat {
  /** Tokens fed before generating: [system block when first], user block, assistant prefix. */
  prompt(message: string, first: boolean, system: string | undefined): Token[];
  /**
   * A whole conversation, each message in its block (the template's own system prompt first when the
   * conversation brings none), then the assistant prefix: a completion's prompt.
   */
  conversation(messages: readonly ChatMessage[]): Token[];
  /** Tokens that close the assistant's reply. */
  readonly close: Token[];
  /** The template's own system prompt for a first turn that brings none (ChatML templates often have one). */
  readonly defaultSystem: string | undefined;
}

export function chatMlTurnFormat(model: LlamaModel): ChatTurnFormat {
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
  const block = (role: ChatMessage['role'], content: ChatMessage['content']) => [
    ...special(`<|im_start|>${role}\n`),
    ...(typeof content === 'string' ? model.tokenize(content, false) : (Array.from(content) as Token[])),
    ...close,
  ];
  return {
    prompt(message, first, system) {
      const sys = system ?? defaultSystem;
      return [
        ...(first && sys !== undefined ? [...special('<|im_start|>system\n'), ...model.tokenize(sys, false), ...close] : []),
        ...special('<|im_start|>user\n'),
        ...model.tokenize(message, false),
        ...special('<|im_end|>\n<|im_start|>assistant\n'),
      ];
    },
    conversation(messages) {
      const tokens: Token[] = [];
      if (messages[0]?.role !== 'system' && defaultSystem !== undefined) tokens.push(...block('system', defaultSystem));
      for (const { role, content } of messages) {
        if (role !== 'system' && role !== 'user' && role !== 'assistant') {
          throw new FabricError('INVALID_ARGUMENT', `a message's role is system, user or assistant, not ${String(role)}`);
        }
        if (typeof content !== 'string' && !(content instanceof Uint32Array)) {
          throw new FabricError('INVALID_ARGUMENT', "a message's content is a string or a Uint32Array of token ids");
        }
        tokens.push(...block(role, content));
      }
      tokens.push(...special('<|im_start|>assistant\n'));
      return tokens;
    },
    close,
    defaultSystem,
  };
}
