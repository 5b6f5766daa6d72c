// The synthetic engine: no model, any shape, for tests and benchmarks where only kvfabric's bookkeeping
// matters (a Llama-3-8B-shaped pool on a machine that could not run the model). Behind the same seam as a
// model, so nothing above it knows which engine it has. A message is its UTF-8 bytes as token ids and the
// reply is empty; a token's KV is a keystream of (context key, position, token id), so any context's rows
// can be recomputed. It also takes turns given as a token count, whose stand-in KV (synthetic-kv.ts) goes
// straight into the pages. Its "cache" is each hot context's token ids: KV is made only when it is saved,
// and the pages need never be read back, so its pool follows the worker's backend.
import { createCipheriv, createHash } from 'node:crypto';

import { FabricError } from '../../fabric/errors';
import { bytesPerTokenOf } from '../../fabric/layout';
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
import { MODELS } from '../models';
import { sameTokens } from '../shared-prefix';
import { syntheticKv } from './synthetic-kv';

export const SYNTHETIC_ENGINE_NAME = 'synthetic';

export class SyntheticEngine implements Engine {
  readonly fingerprint: EngineFingerprint;
  readonly needs: EngineNeeds = { hostPool: false };
  private readonly hot = new Map<string, Uint32Array>();
  private readonly bytesPerToken: number;

  constructor(settings: Pick<EngineSettings, 'model' | 'contextLength'>) {
    const shape = (settings.model ?? MODELS['llama-3-8b']!).shape;
    this.bytesPerToken = bytesPerTokenOf(shape);
    this.fingerprint = Object.freeze({
      engine: SYNTHETIC_ENGINE_NAME,
      version: 'kvfabric synthetic 1',
      modelSha256: '',
      flashAttention: false,
      kType: `${8 * shape.dtypeBytes}-bit`,
      vType: `${8 * shape.dtypeBytes}-bit`,
      shape,
      contextLength: settings.contextLength,
    });
  }

  async turn(request: EngineTurnRequest): Promise<EngineTurnResult> {
    if (typeof request.input !== 'string') throw new FabricError('INVALID_ARGUMENT', 'a turn needs a string input');
    const added = idsOf(request.input);
    const resumedFrom = this.resumedFrom(request.key, request.context);
    this.requireRoom(request.context.tokens.length + added.length);
    this.hot.set(request.key, concat(request.context.tokens, added));
    return { reply: '', promptTokens: added.length, replyTokens: 0, added, resumedFrom };
  }

  renderConversation(messages: readonly ChatMessage[]): Uint32Array {
    if (!Array.isArray(messages)) throw new FabricError('INVALID_ARGUMENT', 'a conversation is an array of messages');
    const ids = messages.reduce(
      (all, message) => concat(all, typeof message.content === 'string' ? idsOf(message.content) : message.content),
      new Uint32Array(0),
    );
    this.requireRoom(ids.length);
    return ids;
  }

  async complete(request: EngineCompletionRequest): Promise<EngineCompletionResult> {
    const { key, context, prompt } = request;
    const resumedFrom = this.resumedFrom(key, context);
    const reused = context.tokens.length;
    if (!(prompt instanceof Uint32Array) || reused >= prompt.length || !sameTokens(context.tokens, prompt.subarray(0, reused))) {
      throw new FabricError('INVALID_ARGUMENT', "a completion's stored context is a prefix of its prompt, shorter than it");
    }
    this.requireRoom(prompt.length);
    this.hot.set(key, prompt.slice());
    const empty = new Uint32Array(0);
    return {
      text: '',
      reply: empty,
      reusedTokens: reused,
      evaluatedTokens: prompt.length - reused,
      finish: 'stop',
      tokens: prompt.slice(),
      resumedFrom,
    };
  }

  async load(key: string, context: StoredContext): Promise<EngineTurnResult['resumedFrom']> {
    const resumedFrom = this.resumedFrom(key, context);
    this.hot.set(key, context.tokens.slice());
    return resumedFrom;
  }

  async save(key: string, fromToken: number): Promise<ContextKv> {
    const tokens = this.hot.get(key);
    if (!tokens) throw new FabricError('INVALID_STATE', `${key} is not hot in the engine`);
    if (!Number.isSafeInteger(fromToken) || fromToken < 0 || fromToken > tokens.length) {
      throw new FabricError('OUT_OF_RANGE', `save from token ${fromToken} of a context holding ${tokens.length}`);
    }
    const saved = tokens.slice(fromToken);
    return { tokens: saved, kv: syntheticRows(key, fromToken, saved, this.bytesPerToken) };
  }

  async release(key: string): Promise<void> {
    this.hot.delete(key);
  }

  async close(): Promise<void> {
    this.hot.clear();
  }

  standInKv(key: string, turn: number, tokens: number, bytesPerToken: number): Uint8Array {
    return syntheticKv(key, turn, tokens, bytesPerToken);
  }

  /** Whether `key` continues hot, from the stored context, or from nothing; INCOMPATIBLE for another engine's context. */
  private resumedFrom(key: string, context: StoredContext): EngineTurnResult['resumedFrom'] {
    if (typeof key !== 'string' || !(context?.tokens instanceof Uint32Array)) {
      throw new FabricError('INVALID_ARGUMENT', 'a call needs a string key and context.tokens as a Uint32Array');
    }
    if (context.tokens.length === 0) return 'empty';
    if (!context.fingerprint) throw new FabricError('INVALID_ARGUMENT', 'a non-empty context needs the fingerprint recorded with it');
    requireCompatible(context.fingerprint, this.fingerprint);
    const hot = this.hot.get(key);
    return hot && sameTokens(hot, context.tokens) ? 'hot' : 'stored';
  }

  private requireRoom(tokens: number): void {
    if (tokens > this.fingerprint.contextLength) {
      throw new FabricError('OUT_OF_RANGE', `the call needs ${tokens} tokens; the context length is ${this.fingerprint.contextLength}`);
    }
  }
}

/** Opens the synthetic engine: the registry's entry. */
export async function openSyntheticEngine(settings: EngineSettings): Promise<SyntheticEngine> {
  return new SyntheticEngine(settings);
}

/** The rows of `ids` at positions from `from` on: each token's a keystream of (key, position, id). */
export function syntheticRows(key: string, from: number, ids: Uint32Array, bytesPerToken: number): Uint8Array {
  const rows = new Uint8Array(ids.length * bytesPerToken);
  const zeros = Buffer.alloc(bytesPerToken);
  ids.forEach((id, i) => {
    const seed = createHash('sha256')
      .update(`kvfabric.synthetic-row.v1\0${key}\0${from + i}\0${id}`)
      .digest();
    const cipher = createCipheriv('aes-128-ctr', seed.subarray(0, 16), seed.subarray(16, 32));
    rows.set(cipher.update(zeros), i * bytesPerToken);
  });
  return rows;
}

function idsOf(text: string): Uint32Array {
  return Uint32Array.from(Buffer.from(text, 'utf8'));
}

function concat(a: Uint32Array, b: Uint32Array): Uint32Array {
  const all = new Uint32Array(a.length + b.length);
  all.set(a);
  all.set(b, a.length);
  return all;
}
