// The stand-in engine: no model, so a turn's KV is the keystream of (context key, turn number) from
// ./synthetic-kv.ts, in any shape (Llama-3-8B's for benchmarks, small ones for tests).
// Deterministic, so a test can recompute any turn's bytes, and behind the same seam as a real engine so
// allocator and tier code cannot tell the difference.
//
// A turn adds `generation.maxTokens` tokens (default 16): the synthetic "reply" never stops early and has
// no prompt. Its first token id is TURN_MARK, the others count up from 2; the turn number is the count of
// TURN_MARKs already in the context (0 for the first turn), so the engine needs no state of its own.
import { syntheticKv } from './synthetic-kv';
import { FabricError } from '../../fabric/errors';
import type { ModelShape } from '../../fabric/types';
import type { Engine, TurnRequest, TurnResult } from '../engine';
import { bytesPerTokenOf } from '../../fabric/layout';
import { requireCompatible, type EngineFingerprint } from '../fingerprint';

export const TURN_MARK = 1;
const DEFAULT_TURN_TOKENS = 16;

export interface SyntheticEngineOptions {
  shape: ModelShape;
  /** Default 131,072. */
  contextLength?: number;
}

export class SyntheticEngine implements Engine {
  readonly fingerprint: EngineFingerprint;
  private readonly bytesPerToken: number;
  private closed = false;

  constructor(options: SyntheticEngineOptions) {
    const { layers, kvHeads, headDim, dtypeBytes } = options.shape;
    this.fingerprint = Object.freeze({
      engine: 'synthetic',
      version: 'kvfabric.synthetic-kv.v1',
      modelSha256: 'synthetic',
      flashAttention: false,
      kType: `${dtypeBytes * 8}-bit`,
      vType: `${dtypeBytes * 8}-bit`,
      shape: Object.freeze({ layers, kvHeads, headDim, dtypeBytes }),
      contextLength: options.contextLength ?? 131_072,
    });
    this.bytesPerToken = bytesPerTokenOf(this.fingerprint.shape);
  }

  async turn(request: TurnRequest): Promise<TurnResult> {
    if (this.closed) throw new FabricError('INVALID_STATE', 'engine is closed');
    const { key, context } = request;
    const tokens = request.generation?.maxTokens ?? DEFAULT_TURN_TOKENS;
    if (typeof key !== 'string' || !(context?.tokens instanceof Uint32Array) || !Number.isSafeInteger(tokens) || tokens < 1) {
      throw new FabricError('INVALID_ARGUMENT', 'a turn needs a string key, context.tokens as a Uint32Array and maxTokens >= 1');
    }
    if (context.tokens.length > 0) {
      if (!context.fingerprint) throw new FabricError('INVALID_ARGUMENT', 'a non-empty context needs the fingerprint recorded with it');
      requireCompatible(context.fingerprint, this.fingerprint);
    }
    if (context.tokens.length + tokens > this.fingerprint.contextLength) {
      throw new FabricError('OUT_OF_RANGE', `${context.tokens.length} + ${tokens} tokens pass the context length ${this.fingerprint.contextLength}`);
    }
    let turn = 0;
    for (const token of context.tokens) if (token === TURN_MARK) turn++;
    const ids = new Uint32Array(tokens);
    ids[0] = TURN_MARK;
    for (let i = 1; i < tokens; i++) ids[i] = i + 1;
    return {
      reply: '',
      promptTokens: 0,
      replyTokens: tokens,
      appended: { tokens: ids, kv: syntheticKv(key, turn, tokens, this.bytesPerToken) },
      // Nothing to load: the bytes of a turn depend only on its key and number.
      resumedFrom: context.tokens.length === 0 ? 'empty' : 'hot',
    };
  }

  async release(): Promise<void> {}

  async close(): Promise<void> {
    this.closed = true;
  }
}
