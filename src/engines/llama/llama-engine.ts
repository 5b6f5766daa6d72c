// The default engine: llama.cpp through node-llama-cpp (pinned 3.22.1, prebuilt binaries only). One
// llama context holds a few sequences; each is the hot copy of one kvfabric context, kept between turns.
// When all are taken, one whose KV kvfabric has saved goes first (least recently used); one holding an
// unsaved turn only when nothing else can, since kvfabric's pages and the turn's token ids rebuild it.
//
// A context crosses the seam as a llama.cpp sequence-state file (GGSQ, ./sequence-state.ts). In: the
// allocator lays the file out natively from the pages into the engine's memory file (a memfd), and
// llama.cpp loads it only after the fingerprint matched and the file's length is right, because it
// trusts the file (a foreign state loaded with acceptRisk can crash the process). Out (save, after a
// turn has answered): the sequence is saved to tmpfs and only the rows past the pages are cut from it.
//
// Pinned, and recorded in the fingerprint: flash attention (default on: V rows are then stored untransposed
// and the conversion is a copy per row), K and V as f16. CPU by default (`gpu: false`); `gpu: 'cuda'`
// needs the optional @node-llama-cpp/linux-x64-cuda package, which this repository does not install, and
// is unverified (docs/engines.md).
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { Llama, LlamaContext, LlamaContextSequence, LlamaGrammar, LlamaModel, Token } from 'node-llama-cpp';

import { FabricError, isFabricError } from '../../fabric/errors';
import { createMemoryFile } from '../../fabric/memory-file';
import { KeyedMutex } from '../../tiers/keyed-mutex';
import type { MemoryFile, PlaneMajorPiece } from '../../fabric/types';
import type {
  ChatMessage,
  ContextKv,
  Engine,
  EngineCompletionRequest,
  EngineCompletionResult,
  EngineTurnRequest,
  EngineTurnResult,
  GenerationSettings,
  StoredContext,
} from '../engine';
import { requireCompatible, type EngineFingerprint } from '../fingerprint';
import { checkJsonSchemaBounds } from '../json-schema-bounds';
import { sharedPrefix } from '../shared-prefix';
import { chatMlTurnFormat, type ChatTurnFormat } from './chat-turn';
import { modelFile as defaultModelFile, sha256File } from './default-model';
import { modelInfoFromMetadata } from './gguf-shape';
import { loadNodeLlamaCpp, noPrebuiltBinary, NODE_LLAMA_CPP_VERSION } from './node-llama-cpp';
import { bytesPerToken, readSequenceStateFile, sequenceStatePieces, type SequenceStateShape } from './sequence-state';

export const LLAMA_ENGINE_NAME = 'llama.cpp';

export interface LlamaEngineOptions {
  /** A GGUF file; default $KVFABRIC_MODEL_FILE, else the cached default model (scripts/ensure-model.ts). */
  modelFile?: string;
  /**
   * Tokens one context may hold, exactly: a turn that would pass it is refused OUT_OF_RANGE (default 4096,
   * or the model's trained length when that is shorter). llama.cpp pads its own cache to a multiple of 256
   * cells; kvfabric holds contexts to this length, not to the padded one. More than the model was trained
   * for is refused.
   */
  contextLength?: number;
  /** Default true. */
  flashAttention?: boolean;
  /** Contexts kept hot at once (llama sequences; default 2). */
  hotContexts?: number;
  /** Default false (CPU). 'cuda' is unverified here. */
  gpu?: false | 'cuda';
  /** Where saved states pass through (a turn's KV on its way out); default /dev/shm (tmpfs) when writable, else the OS temp directory. */
  stateDir?: string;
  /**
   * CPU threads (default: all cores but one). llama.cpp's threads spin at every barrier, so on a busy
   * machine using every core is catastrophic (measured here on 2 cores under load: 115 s instead of
   * 0.5 s for the same 61 tokens); one core stays free for Node and the allocator's copies.
   */
  threads?: number;
  /**
   * Tokens llama.cpp evaluates in one pass (default: node-llama-cpp's, 512). Under 64 (llama.cpp's
   * attention tile), every pass of more than one token takes the same attention kernel, so a token's KV
   * does not depend on how the tokens were split into passes: on one thread, a context continued from
   * kvfabric's pages then replies bit for bit as the same context evaluated whole does. Prefill is slower
   * (docs/ai-sdk.md#identical-replies).
   */
  batchSize?: number;
}

interface HotContext {
  sequence: LlamaContextSequence;
  lastUsed: number;
  /** Holds tokens whose KV kvfabric has not saved yet: evicted only when no other sequence can go. */
  unsaved: boolean;
}

const DEFAULT_MAX_TOKENS = 128;
/** The staging queue's one key: the memory file, written then read by llama.cpp, one load at a time. */
const STATE_FILE = 'state-file';
const DEFAULT_CONTEXT_LENGTH = 4096;

export class LlamaEngine implements Engine {
  readonly fingerprint: EngineFingerprint;
  private readonly hot = new Map<string, HotContext>();
  private readonly busy = new Set<string>();
  private readonly stateShape: SequenceStateShape;
  private readonly tokenBytes: number;
  private useClock = 0;
  /** Where stored contexts are laid out for llama.cpp to load; one load at a time uses it. */
  private readonly stateFile: MemoryFile = createMemoryFile('kvfabric-sequence-state');
  private readonly staging = new KeyedMutex();
  /** Who waits for a sequence while every hot one is in a call: woken when any call ends. */
  private readonly sequenceWaiters: Array<() => void> = [];

  private closed = false;

  private constructor(
    private readonly llama: Llama,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    private readonly format: ChatTurnFormat,
    private readonly vocabularySize: number,
    /** UTF-8 bytes of the vocabulary's longest token: text of n bytes is at least n / this many tokens. */
    private readonly longestTokenBytes: number,
    private readonly stateDir: string,
    /** The llama context's KV streams (one per sequence unless its cache is unified): rebuilt states need it. */
    private readonly streams: number,
    fingerprint: EngineFingerprint,
    readonly modelFile: string,
  ) {
    this.fingerprint = Object.freeze(fingerprint);
    const { layers, kvHeads, headDim } = fingerprint.shape;
    this.stateShape = { layers, kvHeads, headDim, kType: 'f16', vType: 'f16' };
    this.tokenBytes = bytesPerToken(this.stateShape);
  }

  static async open(options: LlamaEngineOptions = {}): Promise<LlamaEngine> {
    const batchSize = options.batchSize === undefined ? undefined : batchSizeOf(options.batchSize);
    const file = options.modelFile ?? defaultModelFile();
    if (!fs.existsSync(file)) {
      throw new FabricError(
        'UNAVAILABLE',
        `model file ${file} not found: run \`npx kvfabric model\` ` +
          "(in kvfabric's repository: `npm run setup:model`) " +
          'or set KVFABRIC_MODEL_FILE',
      );
    }
    const flashAttention = options.flashAttention ?? true;
    const nlc = await loadNodeLlamaCpp();
    const [llama, modelSha256] = await Promise.all([
      nlc
        .getLlama({ gpu: options.gpu ?? false, build: 'never', logLevel: nlc.LlamaLogLevel.error, progressLogs: false })
        .catch((err: unknown) => {
          throw err instanceof nlc.NoBinaryFoundError ? noPrebuiltBinary(options.gpu ?? false) : err;
        }),
      sha256File(file),
    ]);
    const model = await llama.loadModel({ modelPath: file }).catch((err: unknown) => {
      // llama.cpp's own words ("Failed to load model") name no file: a truncated download reads the same.
      throw new FabricError(
        'UNAVAILABLE',
        `cannot load model file ${file}: ${err instanceof Error ? err.message : String(err)} ` +
          '(a truncated or damaged GGUF? download it again: `npx kvfabric model`, or point KVFABRIC_MODEL_FILE at a whole one)',
      );
    });
    try {
      const info = modelInfoFromMetadata(model.fileInfo.metadata);
      const contextLength = contextLengthFor(options.contextLength, info.trainedContextLength);
      const context = await model.createContext({
        contextSize: contextLength,
        sequences: options.hotContexts ?? 2,
        ...(batchSize === undefined ? {} : { batchSize }),
        flashAttention,
        experimentalKvCacheKeyType: 'F16',
        experimentalKvCacheValueType: 'F16',
        // Sliding-window models would otherwise drop old cells from saved states: tokens and cells must match.
        swaFullCache: true,
        threads: options.threads ?? Math.max(1, os.availableParallelism() - 1),
      });
      if (context.contextSize < contextLength) {
        await context.dispose();
        throw new FabricError('UNAVAILABLE', `a context of ${contextLength} tokens was asked for, llama.cpp gave ${context.contextSize}`);
      }
      if (context.flashAttention !== flashAttention) {
        await context.dispose();
        throw new FabricError(
          'UNAVAILABLE',
          `flash attention ${flashAttention ? 'on' : 'off'} was asked for, llama.cpp gave ${context.flashAttention ? 'on' : 'off'}`,
        );
      }
      const metadata = model.fileInfo.metadata as unknown as Record<string, { vocab_size?: number } | undefined>;
      const vocabularySize = metadata[info.architecture]?.vocab_size ?? model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0;
      const stateDir = options.stateDir ?? defaultStateDir();
      const streams = await streamCount(context, stateDir);
      const format = chatMlTurnFormat(model, vocabularySize);
      return new LlamaEngine(
        llama,
        model,
        context,
        format,
        vocabularySize,
        longestTokenBytes(model, vocabularySize),
        stateDir,
        streams,
        {
          engine: LLAMA_ENGINE_NAME,
          version:
            `node-llama-cpp ${NODE_LLAMA_CPP_VERSION} ` +
            `(llama.cpp ${llama.llamaCppRelease.release}, ${llama.gpu === false ? 'cpu' : llama.gpu})`,
          modelSha256,
          flashAttention,
          kType: 'f16',
          vType: 'f16',
          shape: info.shape,
          // What turns are held to (see contextLength): llama.cpp's padded size would let a longer one through.
          contextLength,
        },
        file,
      );
    } catch (err) {
      await model.dispose();
      throw err;
    }
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
    const needed = before.length + prompt.length + maxTokens + this.format.close.length;
    if (needed > this.fingerprint.contextLength) {
      throw new FabricError(
        'OUT_OF_RANGE',
        `the turn needs up to ${needed} tokens (${before.length} in context, ${prompt.length} prompt, ` +
          `${maxTokens} reply, ${this.format.close.length} closing); ` +
          `the context length is ${this.fingerprint.contextLength}`,
      );
    }

    return this.exclusive(key, async () => {
      const { sequence, resumedFrom } = await this.sequenceFor(key, context);
      const { reply } = await this.generateReply(sequence, before.length, prompt, { maxTokens, sampling });
      this.touch(key, sequence, true);
      return {
        reply: this.model.detokenize(reply),
        promptTokens: prompt.length,
        replyTokens: reply.length,
        added: Uint32Array.from(prompt.concat(reply, this.format.close)),
        resumedFrom,
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
    if (!(prompt instanceof Uint32Array) || stored.length >= prompt.length || !stored.every((id, i) => id === prompt[i])) {
      throw new FabricError('INVALID_ARGUMENT', "a completion's stored context is a prefix of its prompt, shorter than it");
    }
    for (const token of prompt) {
      if (token >= this.vocabularySize)
        throw new FabricError('INVALID_ARGUMENT', `token id ${token} is outside the vocabulary (${this.vocabularySize})`);
    }
    const { maxTokens, sampling } = generationOf(request.generation);
    const forced = structured ? this.model.tokenize(structured.prefix, false) : [];
    const suffix = structured ? this.model.tokenize(structured.suffix, false) : [];
    const needed = prompt.length + forced.length + maxTokens + suffix.length + this.format.close.length;
    if (needed > this.fingerprint.contextLength) {
      throw new FabricError(
        'OUT_OF_RANGE',
        `the call needs up to ${needed} tokens (${prompt.length} prompt, ${maxTokens} ` +
          'reply and its forced and closing tokens); ' +
          `the context length is ${this.fingerprint.contextLength}`,
      );
    }
    const grammar = structured ? await this.jsonGrammar(structured.schema) : undefined;

    return this.exclusive(key, async () => {
      const { sequence, resumedFrom, reused } = await this.sequenceSharing(key, context, prompt);
      const rest = Array.from(prompt.subarray(reused)) as Token[];
      let told = '';
      const tell = (text: string) => {
        if (!request.onText || text.length <= told.length) return;
        request.onText(text.slice(told.length));
        told = text;
      };
      tell(structured?.prefix ?? '');
      const { reply, finish } = await this.generateReply(sequence, reused, rest.concat(forced), {
        maxTokens,
        sampling,
        after: suffix,
        ...(grammar ? { grammar } : {}),
        ...(request.signal ? { signal: request.signal } : {}),
        // Whole characters only: a token may end inside a multi-byte character.
        ...(request.onText ? { onText: (text: string) => tell((structured?.prefix ?? '') + text.replace(/\uFFFD+$/, '')) } : {}),
      });
      this.touch(key, sequence, true);
      const ids = Uint32Array.from(forced.concat(reply, suffix));
      const text = structured ? structured.prefix + this.model.detokenize(reply) + structured.suffix : this.model.detokenize(reply);
      tell(text);
      return {
        text,
        reply: ids,
        reusedTokens: reused,
        evaluatedTokens: prompt.length - reused,
        finish,
        tokens: Uint32Array.from(sequence.contextTokens),
        resumedFrom,
      };
    });
  }

  async load(key: string, context: StoredContext): Promise<EngineTurnResult['resumedFrom']> {
    this.checkContext(key, context);
    return this.exclusive(key, async () => (await this.sequenceFor(key, context)).resumedFrom);
  }

  async save(key: string, fromToken: number): Promise<ContextKv> {
    if (this.closed) throw new FabricError('INVALID_STATE', 'engine is closed');
    if (this.busy.has(key)) throw new FabricError('BUSY', `a call on ${key} is already running`);
    const entry = this.hot.get(key);
    if (!entry) throw new FabricError('INVALID_STATE', `${key} is not hot in the engine`);
    const held = entry.sequence.contextTokens.length;
    if (!Number.isSafeInteger(fromToken) || fromToken < 0 || fromToken > held) {
      throw new FabricError('OUT_OF_RANGE', `save from token ${fromToken} of a sequence holding ${held}`);
    }
    this.busy.add(key);
    try {
      const saved = await this.saveFrom(entry.sequence, fromToken);
      entry.unsaved = false;
      return saved;
    } finally {
      this.callEnded(key);
    }
  }

  async release(key: string): Promise<void> {
    const entry = this.hot.get(key);
    if (!entry) return;
    this.hot.delete(key);
    if (!entry.sequence.disposed) await entry.sequence.dispose();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const wake of this.sequenceWaiters.splice(0)) wake(); // they find the engine closed
    for (const key of [...this.hot.keys()]) await this.release(key);
    await this.context.dispose();
    await this.model.dispose();
    await this.llama.dispose();
    await this.staging.run(STATE_FILE, async () => this.stateFile.close());
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
    if (this.busy.has(key)) throw new FabricError('BUSY', `a call on ${key} is already running`);
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

  /** Runs `work` as the only call on `key`; an error drops the hot copy, which may be half changed. */
  private async exclusive<T>(key: string, work: () => Promise<T>): Promise<T> {
    this.busy.add(key);
    try {
      return await work();
    } catch (err) {
      await this.release(key);
      throw isFabricError(err) ? err : new FabricError('UNAVAILABLE', `llama engine: ${(err as Error).message}`);
    } finally {
      this.callEnded(key);
    }
  }

  /** `key`'s call is over: it may be evicted again, and whoever waits for a sequence looks again. */
  private callEnded(key: string): void {
    this.busy.delete(key);
    for (const wake of this.sequenceWaiters.splice(0)) wake();
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
    const entry = this.hot.get(key);
    if (entry && sameTokens(entry.sequence.contextTokens, tokens)) {
      this.touch(key, entry.sequence, entry.unsaved);
      return { sequence: entry.sequence, resumedFrom: 'hot' };
    }
    await this.release(key);
    for (const token of tokens) {
      if (token >= this.vocabularySize)
        throw new FabricError('INTEGRITY', `token id ${token} is outside the vocabulary (${this.vocabularySize})`);
    }
    const storedTokens = context.storedTokens ?? tokens.length;
    const sequence = await this.freeSequence();
    this.touch(key, sequence, storedTokens < tokens.length);
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
   * Evaluates `input` on a sequence holding `held` tokens and generates a reply: until an end token,
   * `maxTokens`, a whole JSON value under `grammar`, or `signal`. Then whatever was sampled but not yet
   * evaluated goes in, and `after` and the closing tokens, whether the reply ended on its own or not: the
   * sequence's tokens are then exactly those whose KV is cached, and a restored context continues exactly
   * like one that stayed hot. `onText` is told the reply's text after each token.
   */
  private async generateReply(
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
  ): Promise<{ reply: Token[]; finish: EngineCompletionResult['finish'] }> {
    const { grammar } = options;
    const nlc = grammar ? await loadNodeLlamaCpp() : undefined;
    const generation = sequence.evaluate(input, {
      ...options.sampling,
      ...(nlc && grammar ? { grammarEvaluationState: new nlc.LlamaGrammarEvaluationState({ model: this.model, grammar }) } : {}),
    });
    const reply: Token[] = [];
    let finish: EngineCompletionResult['finish'] = 'stop';
    for await (const token of generation) {
      if (this.model.isEogToken(token)) break;
      reply.push(token);
      const text = options.onText || grammar ? this.model.detokenize(reply) : '';
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
    await sequence.evaluateWithoutGeneratingNewTokens(added.slice(evaluated).concat(options.after ?? [], this.format.close));
    return { reply, finish };
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
    const entry = this.hot.get(key);
    const hotShared = entry ? sharedPrefix(entry.sequence.contextTokens, prompt) : 0;
    if (entry && hotShared > 0 && hotShared >= context.tokens.length) {
      const reused = Math.min(hotShared, prompt.length - 1);
      const held = entry.sequence.contextTokens.length;
      if (held > reused) await entry.sequence.eraseContextTokenRanges([{ start: reused, end: held }]);
      this.touch(key, entry.sequence, true);
      return { sequence: entry.sequence, resumedFrom: 'hot', reused };
    }
    const { sequence, resumedFrom } = await this.sequenceFor(key, context);
    return { sequence, resumedFrom, reused: context.tokens.length };
  }

  /** A JSON Schema as a llama.cpp grammar; one the grammar compiler refuses is the caller's INVALID_ARGUMENT. */
  private async jsonGrammar(schema: object): Promise<LlamaGrammar> {
    try {
      return await this.llama.createGrammarForJsonSchema(schema as Parameters<Llama['createGrammarForJsonSchema']>[0]);
    } catch (err) {
      throw new FabricError('INVALID_ARGUMENT', `the reply's JSON Schema cannot be a grammar: ${(err as Error).message}`);
    }
  }

  /** The stored pages of `tokens` into `sequence`: laid out natively into the memory file, then loaded. */
  private async loadStored(sequence: LlamaContextSequence, tokens: Uint32Array, context: StoredContext): Promise<void> {
    const pieces = sequenceStatePieces(tokens, this.stateShape, {
      vTransposed: !this.fingerprint.flashAttention,
      streams: this.streams,
      stream: 0,
      seqId: 0,
    });
    const expectedLength = fileLength(pieces, tokens.length, this.tokenBytes / (2 * this.stateShape.layers));
    await this.staging.run(STATE_FILE, async () => {
      const length = await context.writeKv(this.stateFile, pieces);
      // Rows of another size would make another file: llama.cpp must not be handed it.
      if (length !== expectedLength) {
        throw new FabricError(
          'INTEGRITY',
          `stored context wrote a ${length}-byte state for ${tokens.length} tokens of ${this.tokenBytes} bytes; expected ${expectedLength}`,
        );
      }
      await sequence.loadStateFromFile(this.stateFile.path, { acceptRisk: true }).catch((err: unknown) => {
        throw new FabricError('INTEGRITY', `llama.cpp refused the rebuilt state: ${(err as Error).message}`);
      });
    });
  }

  /**
   * A sequence of the llama context, evicting a hot one when all are taken: the least recently used whose
   * KV kvfabric has saved, else the least recently used (its pages and token ids still rebuild it). When
   * every hot one is in a call (a turn, a save), it waits for the first call to end.
   */
  private async freeSequence(): Promise<LlamaContextSequence> {
    while (this.context.sequencesLeft === 0) {
      if (this.closed) throw new FabricError('INVALID_STATE', 'engine is closed');
      const idle = [...this.hot.entries()]
        .filter(([key]) => !this.busy.has(key))
        .sort((a, b) => Number(a[1].unsaved) - Number(b[1].unsaved) || a[1].lastUsed - b[1].lastUsed)[0];
      if (idle) await this.release(idle[0]);
      else await new Promise<void>((wake) => this.sequenceWaiters.push(wake));
    }
    return this.context.getSequence();
  }

  private touch(key: string, sequence: LlamaContextSequence, unsaved: boolean): void {
    this.hot.set(key, { sequence, lastUsed: ++this.useClock, unsaved });
  }

  /** Saves the sequence and reads back only the token ids and rows from `from` on. */
  private async saveFrom(sequence: LlamaContextSequence, from: number): Promise<ContextKv> {
    const statePath = this.statePath();
    try {
      await sequence.saveStateToFile(statePath);
      const state = readSequenceStateFile(statePath, this.stateShape, from);
      if (!sameTokens(Array.from(state.tokens) as Token[], Uint32Array.from(sequence.contextTokens))) {
        throw new FabricError('INVALID_STATE', "the saved sequence does not hold the sequence's tokens");
      }
      return { tokens: state.tokens.slice(from), kv: state.kv };
    } finally {
      await fs.promises.rm(statePath, { force: true });
    }
  }

  private statePath(): string {
    return path.join(this.stateDir, `kvfabric-${process.pid}-${randomUUID()}.ggsq`);
  }
}

/** The length of the file `pieces` lay out for `tokens` tokens: their literal bytes and every plane's rows. */
function fileLength(pieces: readonly PlaneMajorPiece[], tokens: number, rowBytes: number): number {
  return pieces.reduce((sum, piece) => sum + ('bytes' in piece ? piece.bytes.byteLength : tokens * rowBytes), 0);
}

/** UTF-8 bytes of the longest text any token stands for (at least 1). */
function longestTokenBytes(model: LlamaModel, vocabularySize: number): number {
  let longest = 1;
  for (let token = 0; token < vocabularySize; token++) {
    longest = Math.max(longest, Buffer.byteLength(model.detokenize([token as Token], true)));
  }
  return longest;
}

/** The batch size asked for, checked before anything loads. */
function batchSizeOf(asked: number): number {
  if (!Number.isSafeInteger(asked) || asked < 1)
    throw new FabricError('INVALID_ARGUMENT', `batchSize must be a whole number of tokens >= 1, got ${asked}`);
  return asked;
}

/** The length asked for, checked against the model; the default fits the model. */
function contextLengthFor(asked: number | undefined, trained: number): number {
  const limit = trained > 0 ? trained : Infinity;
  if (asked === undefined) return Math.min(DEFAULT_CONTEXT_LENGTH, limit);
  // The worker's flag and the plugin's option, named: this is where a wrong one is first noticed.
  const setting = 'context length (--context-length, contextLength)';
  if (!Number.isSafeInteger(asked) || asked < 1)
    throw new FabricError('INVALID_ARGUMENT', `${setting} must be a whole number of tokens >= 1, got ${asked}`);
  if (asked > limit)
    throw new FabricError(
      'INVALID_ARGUMENT',
      `${setting} ${asked} is more than the model was trained for (${trained} tokens): ask for at most ${trained}`,
    );
  return asked;
}

/** Saves an empty sequence once: its header says how many streams this context's states carry. */
async function streamCount(context: LlamaContext, stateDir: string): Promise<number> {
  const sequence = context.getSequence();
  const statePath = path.join(stateDir, `kvfabric-${process.pid}-${randomUUID()}.ggsq`);
  try {
    await sequence.saveStateToFile(statePath);
    const file = await fs.promises.readFile(statePath);
    return new DataView(file.buffer, file.byteOffset, file.byteLength).getUint32(12, true);
  } finally {
    await sequence.dispose();
    await fs.promises.rm(statePath, { force: true });
  }
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

/** A call's generation settings, checked: the reply's bound and llama.cpp's sampling options. */
function generationOf(settings: GenerationSettings | undefined): { maxTokens: number; sampling: { temperature: number; seed?: number } } {
  const maxTokens = settings?.maxTokens ?? DEFAULT_MAX_TOKENS;
  const temperature = settings?.temperature ?? 0;
  if (!Number.isSafeInteger(maxTokens) || maxTokens < 1 || !(temperature >= 0)) {
    throw new FabricError('INVALID_ARGUMENT', `maxTokens must be an integer >= 1 and temperature >= 0 (got ${maxTokens}, ${temperature})`);
  }
  return { maxTokens, sampling: { temperature, ...(temperature > 0 ? { seed: settings?.seed ?? 0 } : {}) } };
}

function sameTokens(a: readonly Token[], b: Uint32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function defaultStateDir(): string {
  try {
    fs.accessSync('/dev/shm', fs.constants.W_OK);
    return '/dev/shm';
  } catch {
    return os.tmpdir();
  }
}
