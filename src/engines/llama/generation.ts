// A reply generated on a llama sequence, and what bounds it: the call's generation settings, and the
// context length every call is held to before anything runs.
import type { LlamaGrammar, LlamaModel, LlamaContextSequence, Token } from 'node-llama-cpp';

import { FabricError } from '../../fabric/errors';
import type { EngineCompletionResult, GenerationSettings } from '../engine';
import { loadNodeLlamaCpp } from './node-llama-cpp';

const DEFAULT_MAX_TOKENS = 128;

/** A call's generation settings, checked: the reply's bound and llama.cpp's sampling options. */
export function generationOf(settings: GenerationSettings | undefined): {
  maxTokens: number;
  sampling: { temperature: number; seed?: number };
} {
  const maxTokens = settings?.maxTokens ?? DEFAULT_MAX_TOKENS;
  const temperature = settings?.temperature ?? 0;
  if (!Number.isSafeInteger(maxTokens) || maxTokens < 1 || !(temperature >= 0)) {
    throw new FabricError('INVALID_ARGUMENT', `maxTokens must be an integer >= 1 and temperature >= 0 (got ${maxTokens}, ${temperature})`);
  }
  return { maxTokens, sampling: { temperature, ...(temperature > 0 ? { seed: settings?.seed ?? 0 } : {}) } };
}

/**
 * OUT_OF_RANGE unless the most a call may need fits the context length: `parts` are its token counts, each
 * named (what is in context, the prompt, the reply's bound, forced and closing tokens).
 */
export function requireTokenBudget(call: 'turn' | 'call', contextLength: number, parts: Record<string, number>): void {
  const needed = Object.values(parts).reduce((sum, count) => sum + count, 0);
  if (needed <= contextLength) return;
  const named = Object.entries(parts)
    .map(([part, count]) => `${count} ${part}`)
    .join(', ');
  throw new FabricError('OUT_OF_RANGE', `the ${call} needs up to ${needed} tokens (${named}); the context length is ${contextLength}`);
}

/** What a reply is generated with: the model, and the tokens that close every reply (chat-turn.ts). */
export interface ReplyModel {
  model: LlamaModel;
  close: readonly Token[];
}

/**
 * Evaluates `input` on a sequence holding `held` tokens and generates a reply: until an end token,
 * `maxTokens`, a whole JSON value under `grammar`, or `signal`. `onText` is told the reply's text after
 * each token. What was sampled but not yet evaluated, then `after` and the closing tokens, whether the reply
 * ended on its own or not, come back as `closing`: the caller answers first and evaluates them after
 * (HotSequences.answer), since the reply does not depend on them. The sequence's tokens are then exactly those
 * whose KV is cached, and a restored context continues exactly like one that stayed hot.
 */
export async function generateReply(
  { model, close }: ReplyModel,
  sequence: LlamaContextSequence,
  held: number,
  input: Token[],
  options: {
    maxTokens: number;
    sampling: { temperature: number; seed?: number };
    after?: Token[];
    grammar?: LlamaGrammar;
    signal?: AbortSignal;
    onText?: (text: string) => void;
  },
): Promise<{ reply: Token[]; finish: EngineCompletionResult['finish']; closing: Token[] }> {
  const { grammar } = options;
  const nlc = grammar ? await loadNodeLlamaCpp() : undefined;
  const generation = sequence.evaluate(input, {
    ...options.sampling,
    ...(nlc && grammar ? { grammarEvaluationState: new nlc.LlamaGrammarEvaluationState({ model, grammar }) } : {}),
  });
  const reply: Token[] = [];
  let finish: EngineCompletionResult['finish'] = 'stop';
  for await (const token of generation) {
    if (model.isEogToken(token)) break;
    reply.push(token);
    const text = options.onText || grammar ? model.detokenize(reply) : '';
    options.onText?.(text);
    // llama.cpp's JSON grammar lets whitespace follow the value without end: the value is the reply.
    if (grammar && wholeJson(text)) break;
    if (reply.length >= options.maxTokens || options.signal?.aborted) {
      finish = 'length';
      break;
    }
  }
  const added = input.concat(reply);
  const evaluated = sequence.contextTokens.length - held;
  if (evaluated < input.length || evaluated > added.length) {
    throw new FabricError(
      'INVALID_STATE',
      `sequence holds ${held + evaluated} tokens after generation, expected ${held + input.length}..${held + added.length}`,
    );
  }
  return { reply, finish, closing: added.slice(evaluated).concat(options.after ?? [], close) };
}

/** Whether `text` is a whole JSON value: an object or array once it closes, anything else once whitespace follows it. */
function wholeJson(text: string): boolean {
  try {
    const value: unknown = JSON.parse(text);
    return (typeof value === 'object' && value !== null) || /\s$/.test(text);
  } catch {
    return false;
  }
}
