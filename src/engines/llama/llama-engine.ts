// The default engine: llama.cpp through node-llama-cpp (pinned 3.22.1, prebuilt binaries only), in rooms:
// opening it and its options (open-llama.ts), the hot copies of contexts in llama sequences
// (hot-sequences.ts), contexts in and out as llama.cpp sequence-state files (state-files.ts), and a reply's
// generation (generation.ts). This file is the seam over them: each call's checks, then the hot copy it
// continues or the stored context it loads, then the generation.
//
// Pinned, and recorded in the fingerprint: flash attention (default on: V rows are then stored untransposed
// and the conversion is a copy per row), K and V as f16. CPU by default (`gpu: false`); `gpu: 'cuda'`
// needs the optional @node-llama-cpp/linux-x64-cuda package, which this repository does not install, and
// is unverified (docs/engines.md).
import type { Llama, LlamaContext, LlamaContextSequence, LlamaGrammar, LlamaModel, Token } from 'node-llama-cpp';

import { FabricError } from '../../fabric/errors';
import type {
  ChatMessage,
  ContextKv,
  Engine,
  EngineCompletionRequest,
  EngineCompletionResult,
  EngineNeeds,
  EngineSettings,
  EngineTurnRequest,
  EngineTurnResult,
  StoredContext,
} from '../engine';
import { requireCompatible, type EngineFingerprint } from '../fingerprint';
import { checkJsonSchemaBounds } from '../json-schema-bounds';
import { sameTokens, sharedPrefix } from '../shared-prefix';
import type { ChatTurnFormat } from './chat-turn';
import { generateReply, generationOf, requireTokenBudget, type ReplyModel } from './generation';
import { HotSequences } from './hot-sequences';
import { openLlama, type LlamaEngineOptions, type OpenedLlama } from './open-llama';
import { SequenceStateFiles } from './state-files';

export class LlamaEngine implements Engine {
  readonly fingerprint: EngineFingerprint;
  // llama.cpp reads attention only from its own cache (on the GPU with a CUDA build): docs/engines.md.
  readonly needs: EngineNeeds = { hostPool: true };
  readonly modelFile: string;
  private readonly llama: Llama;
  private readonly model: LlamaModel;
  private readonly context: LlamaContext;
  private readonly format: ChatTurnFormat;
  private readonly vocabularySize: number;
  /** UTF-8 bytes of the vocabulary's longest token: text of n bytes is at least n / this many tokens. */
  private readonly longestTokenBytes: number;
  private readonly replies: ReplyModel;
  private readonly hot: HotSequences;
  private readonly states: SequenceStateFiles;
  private closed = false;

  private constructor(opened: OpenedLlama) {
    this.llama = opened.llama;
    this.model = opened.model;
    this.context = opened.context;
    this.format = opened.format;
    this.vocabularySize = opened.vocabularySize;
    this.longestTokenBytes = opened.longestTokenBytes;
    this.modelFile = opened.modelFile;
    this.fingerprint = Object.freeze(opened.fingerprint);
    this.replies = { model: opened.model, close: opened.format.close };
    this.hot = new HotSequences(opened.context);
    const { layers, kvHeads, headDim } = opened.fingerprint.shape;
    this.states = new SequenceStateFiles(
      { layers, kvHeads, headDim, kType: 'f16', vType: 'f16' },
      { vTransposed: !opened.fingerprint.flashAttention, streams: opened.streams, stateDir: opened.stateDir },
    );
  }

  static async open(options: LlamaEngineOptions = {}): Promise<LlamaEngine> {
    return new LlamaEngine(await openLlama(options));
  }

  async turn(request: EngineTurnRequest): Promise<EngineTurnResult> {
    const { key, context, input } = request;
    if (typeof input !== 'string') throw new FabricError('INVALID_ARGUMENT', 'a turn needs a string input');
    const before = this.checkContext(key, context);
    const { maxTokens, sampling } = generationOf(request.generation);
    this.requireFewerTokensThanContext(
      [{ content: input }, { content: before.length === 0 ? request.system : undefined }],
      before.length + maxTokens,
    );
    const prompt = this.format.prompt(input, before.length === 0, request.system);
    // Reply, then the last sampled token if llama.cpp has not evaluated it, then the closing tokens.
    requireTokenBudget('turn', this.fingerprint.contextLength, {
      'in context': before.length,
      prompt: prompt.length,
      reply: maxTokens,
      closing: this.format.close.length,
    });

    return this.hot.answer(key, async () => {
      const { sequence, resumedFrom } = await this.sequenceFor(key, context);
      const { reply, closing } = await generateReply(this.replies, sequence, before.length, prompt, { maxTokens, sampling });
      this.hot.touch(key, sequence, true);
      return {
        value: {
          reply: this.model.detokenize(reply),
          promptTokens: prompt.length,
          replyTokens: reply.length,
          added: Uint32Array.from(prompt.concat(reply, this.format.close)),
          resumedFrom,
        },
        tail: () => sequence.evaluateWithoutGeneratingNewTokens(closing),
      };
    });
  }

  renderConversation(messages: readonly ChatMessage[]): Uint32Array {
    if (!Array.isArray(messages)) throw new FabricError('INVALID_ARGUMENT', 'a conversation is an array of messages');
    this.requireFewerTokensThanContext(messages, 0);
    return Uint32Array.from(this.format.conversation(messages, this.fingerprint.contextLength));
  }

  async complete(request: EngineCompletionRequest): Promise<EngineCompletionResult> {
    const { key, context, prompt, structured } = request;
    const stored = this.checkContext(key, context);
    if (structured) checkJsonSchemaBounds(structured.schema, "the reply's JSON Schema");
    if (!(prompt instanceof Uint32Array) || stored.length >= prompt.length || sharedPrefix(stored, prompt) !== stored.length) {
      throw new FabricError('INVALID_ARGUMENT', "a completion's stored context is a prefix of its prompt, shorter than it");
    }
    for (const token of prompt) {
      if (token >= this.vocabularySize)
        throw new FabricError('INVALID_ARGUMENT', `token id ${token} is outside the vocabulary (${this.vocabularySize})`);
    }
    const { maxTokens, sampling } = generationOf(request.generation);
    const forced = structured ? this.model.tokenize(structured.prefix, false) : [];
    const suffix = structured ? this.model.tokenize(structured.suffix, false) : [];
    requireTokenBudget('call', this.fingerprint.contextLength, {
      prompt: prompt.length,
      'forced before the reply': forced.length,
      reply: maxTokens,
      'forced after it': suffix.length,
      closing: this.format.close.length,
    });
    const grammar = structured ? await this.jsonGrammar(structured.schema) : undefined;

    return this.hot.answer(key, async () => {
      const { sequence, resumedFrom, reused } = await this.sequenceSharing(key, context, prompt);
      const rest = Array.from(prompt.subarray(reused)) as Token[];
      let told = '';
      const tell = (text: string) => {
        if (!request.onText || text.length <= told.length) return;
        request.onText(text.slice(told.length));
        told = text;
      };
      tell(structured?.prefix ?? '');
      const { reply, finish, closing } = await generateReply(this.replies, sequence, reused, rest.concat(forced), {
        maxTokens,
        sampling,
        after: suffix,
        ...(grammar ? { grammar } : {}),
        ...(request.signal ? { signal: request.signal } : {}),
        // Whole characters only: a token may end inside a multi-byte character.
        ...(request.onText ? { onText: (text: string) => tell((structured?.prefix ?? '') + text.replace(/\uFFFD+$/, '')) } : {}),
      });
      this.hot.touch(key, sequence, true);
      const ids = Uint32Array.from(forced.concat(reply, suffix));
      const text = structured ? structured.prefix + this.model.detokenize(reply) + structured.suffix : this.model.detokenize(reply);
      tell(text);
      return {
        value: {
          text,
          reply: ids,
          reusedTokens: reused,
          evaluatedTokens: prompt.length - reused,
          finish,
          tokens: Uint32Array.from(sequence.contextTokens.concat(closing)),
          resumedFrom,
        },
        tail: () => sequence.evaluateWithoutGeneratingNewTokens(closing),
      };
    });
  }

  async load(key: string, context: StoredContext): Promise<EngineTurnResult['resumedFrom']> {
    this.checkContext(key, context);
    return this.hot.exclusive(key, async () => (await this.sequenceFor(key, context)).resumedFrom);
  }

  async save(key: string, fromToken: number): Promise<ContextKv> {
    // Inside the read: the last call's closing tokens may still be going in.
    return this.hot.reading(key, async () => {
      const entry = this.hot.of(key);
      if (!entry) throw new FabricError('INVALID_STATE', `${key} is not hot in the engine`);
      const held = entry.sequence.contextTokens.length;
      if (!Number.isSafeInteger(fromToken) || fromToken < 0 || fromToken > held) {
        throw new FabricError('OUT_OF_RANGE', `save from token ${fromToken} of a sequence holding ${held}`);
      }
      const saved = await this.states.save(entry.sequence, fromToken);
      entry.unsaved = false;
      return saved;
    });
  }

  async release(key: string): Promise<void> {
    await this.hot.release(key);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.hot.close();
    await this.context.dispose();
    await this.model.dispose();
    await this.llama.dispose();
    await this.states.close();
  }

  /** The checks every call on a context starts with; returns its token ids. */
  private checkContext(key: string, context: StoredContext): Uint32Array {
    if (this.closed) throw new FabricError('INVALID_STATE', 'engine is closed');
    if (typeof key !== 'string' || !(context?.tokens instanceof Uint32Array)) {
      throw new FabricError('INVALID_ARGUMENT', 'a call needs a string key and context.tokens as a Uint32Array');
    }
    const stored = context.storedTokens ?? context.tokens.length;
    if (!Number.isSafeInteger(stored) || stored < 0 || stored > context.tokens.length) {
      throw new FabricError('INVALID_ARGUMENT', `storedTokens ${stored} of a context of ${context.tokens.length} tokens`);
    }
    if (context.tokens.length > 0) {
      if (!context.fingerprint) throw new FabricError('INVALID_ARGUMENT', 'a non-empty context needs the fingerprint recorded with it');
      requireCompatible(context.fingerprint, this.fingerprint);
    }
    this.hot.requireIdle(key);
    return context.tokens;
  }

  /**
   * OUT_OF_RANGE when `messages` and `alsoNeeded` tokens cannot fit the context, judged from sizes alone:
   * before anything is tokenized. A token holds at most `longestTokenBytes` bytes of text, so text of n
   * bytes is at least n / that many tokens; ids count as they are, or as their text when that is fewer
   * (ids holding a special token go as their text). What is neither is left to the renderer to refuse.
   */
  private requireFewerTokensThanContext(messages: readonly Partial<ChatMessage>[], alsoNeeded: number): void {
    const limit = this.fingerprint.contextLength;
    const textTokens = (text: unknown) =>
      typeof text === 'string' ? Math.ceil(Buffer.byteLength(text) / this.longestTokenBytes) : Infinity;
    let fewest = alsoNeeded;
    for (const message of messages) {
      const { content, text } = message ?? {};
      if (typeof content === 'string') fewest += textTokens(content);
      else if (content instanceof Uint32Array) fewest += Math.min(content.length, textTokens(text));
      if (fewest > limit) {
        throw new FabricError(
          'OUT_OF_RANGE',
          `the call needs more than ${limit} tokens, the context length (at least ${fewest}, judged from its size)`,
        );
      }
    }
  }

  /**
   * The hot sequence of `key` when it holds exactly the context's tokens; otherwise a sequence loaded from
   * the store, its tail evaluated. Held under `key` (so an error after this disposes it).
   */
  private async sequenceFor(
    key: string,
    context: StoredContext,
  ): Promise<{ sequence: LlamaContextSequence; resumedFrom: EngineTurnResult['resumedFrom'] }> {
    const { tokens } = context;
    const entry = this.hot.of(key);
    if (entry && sameTokens(entry.sequence.contextTokens, tokens)) {
      this.hot.touch(key, entry.sequence, entry.unsaved);
      return { sequence: entry.sequence, resumedFrom: 'hot' };
    }
    await this.hot.release(key);
    for (const token of tokens) {
      if (token >= this.vocabularySize)
        throw new FabricError('INTEGRITY', `token id ${token} is outside the vocabulary (${this.vocabularySize})`);
    }
    const storedTokens = context.storedTokens ?? tokens.length;
    const sequence = await this.hot.free();
    this.hot.touch(key, sequence, storedTokens < tokens.length);
    if (storedTokens > 0) await this.loadStored(sequence, tokens.subarray(0, storedTokens), context);
    // The tail whose KV was never saved: evaluated again (the same tokens give the same KV on this build:
    // tests/engines check it byte for byte).
    if (storedTokens < tokens.length) {
      await sequence.evaluateWithoutGeneratingNewTokens(Array.from(tokens.subarray(storedTokens)) as Token[]);
    }
    if (!sameTokens(sequence.contextTokens, tokens))
      throw new FabricError('INTEGRITY', 'the loaded sequence does not hold the stored tokens');
    return { sequence, resumedFrom: tokens.length === 0 ? 'empty' : 'stored' };
  }

  /**
   * A sequence holding the longest prefix of `prompt` that `key`'s hot copy or the stored `context`
   * (itself a prefix of the prompt) gives, and never the whole prompt (a call evaluates at least one token).
   */
  private async sequenceSharing(
    key: string,
    context: StoredContext,
    prompt: Uint32Array,
  ): Promise<{ sequence: LlamaContextSequence; resumedFrom: EngineTurnResult['resumedFrom']; reused: number }> {
    const entry = this.hot.of(key);
    const hotShared = entry ? sharedPrefix(entry.sequence.contextTokens, prompt) : 0;
    if (entry && hotShared > 0 && hotShared >= context.tokens.length) {
      const reused = Math.min(hotShared, prompt.length - 1);
      const held = entry.sequence.contextTokens.length;
      if (held > reused) await entry.sequence.eraseContextTokenRanges([{ start: reused, end: held }]);
      this.hot.touch(key, entry.sequence, true);
      return { sequence: entry.sequence, resumedFrom: 'hot', reused };
    }
    const { sequence, resumedFrom } = await this.sequenceFor(key, context);
    return { sequence, resumedFrom, reused: context.tokens.length };
  }

  /**
   * The stored pages of `tokens` into `sequence` (state-files.ts). A method of its own: the engine kill
   * tests pause a load here, once the state is laid out and before llama.cpp reads it.
   */
  private loadStored(sequence: LlamaContextSequence, tokens: Uint32Array, context: StoredContext): Promise<void> {
    return this.states.load(sequence, tokens, context);
  }

  /** A JSON Schema as a llama.cpp grammar; one the grammar compiler refuses is the caller's INVALID_ARGUMENT. */
  private async jsonGrammar(schema: object): Promise<LlamaGrammar> {
    try {
      return await this.llama.createGrammarForJsonSchema(schema as Parameters<Llama['createGrammarForJsonSchema']>[0]);
    } catch (err) {
      throw new FabricError('INVALID_ARGUMENT', `the reply's JSON Schema cannot be a grammar: ${(err as Error).message}`);
    }
  }
}

/**
 * Opens the llama engine from a worker's settings: the registry's entry. A CUDA pool's worker runs the
 * model on the GPU too (unverified here).
 */
export function openLlamaEngine(settings: EngineSettings): Promise<LlamaEngine> {
  return LlamaEngine.open({
    ...(settings.modelFile ? { modelFile: settings.modelFile } : {}),
    contextLength: settings.contextLength,
    ...(settings.batchSize === undefined ? {} : { batchSize: settings.batchSize }),
    ...(settings.backend === 'cuda' ? { gpu: 'cuda' as const } : {}),
  });
}
