// The synthetic engine is today's keystream behind the engine seam: a turn's bytes are syntheticKv of
// (key, turn number), in any shape, and it refuses what a real engine refuses.
import { describe, expect, it } from 'vitest';

import { syntheticKv } from '../../src/engines/synthetic/synthetic-kv';
import { FabricError } from '../../src/fabric';
import type { StoredContext } from '../../src/engines/engine';
import { SyntheticEngine, TURN_MARK } from '../../src/engines/synthetic/synthetic-engine';
import { expectSameBytes } from '../fabric/implementations';

const LLAMA_3_8B = { layers: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 };

function stored(tokens: Uint32Array, engine: SyntheticEngine): StoredContext {
  return { tokens, fingerprint: engine.fingerprint, loadKv: async () => { throw new Error('the synthetic engine never loads'); } };
}

describe('SyntheticEngine', () => {
  it('appends syntheticKv(key, turn) in the Llama-3-8B shape, counting turns from the context', async () => {
    const engine = new SyntheticEngine({ shape: LLAMA_3_8B });
    let tokens = new Uint32Array(0);
    for (const turn of [0, 1, 2]) {
      const result = await engine.turn({ key: 'agent-1', context: stored(tokens, engine), input: '', generation: { maxTokens: 20 + turn } });
      expect(result.appended.tokens.length).toBe(20 + turn);
      expect(result.appended.tokens[0]).toBe(TURN_MARK);
      expectSameBytes(result.appended.kv, syntheticKv('agent-1', turn, 20 + turn, 131_072));
      const next = new Uint32Array(tokens.length + result.appended.tokens.length);
      next.set(tokens);
      next.set(result.appended.tokens, tokens.length);
      tokens = next;
    }
    await engine.close();
  });

  it('refuses a context of another engine (INCOMPATIBLE) and one that would pass the context length (OUT_OF_RANGE)', async () => {
    const engine = new SyntheticEngine({ shape: LLAMA_3_8B, contextLength: 64 });
    const other = new SyntheticEngine({ shape: { ...LLAMA_3_8B, kvHeads: 4 } });
    const tokens = Uint32Array.of(TURN_MARK, 2, 3);
    await expect(engine.turn({ key: 'a', context: stored(tokens, other), input: '' })).rejects.toMatchObject({ code: 'INCOMPATIBLE' });
    await expect(engine.turn({ key: 'a', context: stored(tokens, engine), input: '', generation: { maxTokens: 62 } })).rejects.toBeInstanceOf(FabricError);
    await expect(engine.turn({ key: 'a', context: stored(tokens, engine), input: '', generation: { maxTokens: 62 } })).rejects.toMatchObject({ code: 'OUT_OF_RANGE' });
    expect((await engine.turn({ key: 'a', context: stored(tokens, engine), input: '', generation: { maxTokens: 61 } })).appended.tokens.length).toBe(61);
  });
});
