// The llama engine with the real default model and a real kvfabric pool, no mocks: a conversation
// continued from kvfabric pages after the engine let go of it generates exactly what an uninterrupted one
// does; forks of a stored prefix equal fresh runs; foreign, oversized and corrupted contexts are typed
// errors that change nothing and never crash the process. Contexts stay short: every token costs CPU time.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FabricError, NativeAllocator, type ContextHandle } from '../../src/fabric';
import type { ContextKv, StoredContext, EngineTurnResult } from '../../src/engines/engine';
import type { EngineFingerprint } from '../../src/engines/fingerprint';
import { LlamaEngine } from '../../src/engines/llama/llama-engine';
import { expectSameBytes } from '../fabric/implementations';

const TENANT = 7;
const MAX_TOKENS = 12;
const MESSAGES = ['Name a color.', 'Name a fruit.', 'Name an animal.'];

let engine: LlamaEngine;
let pool: NativeAllocator;

beforeAll(async () => {
  engine = await LlamaEngine.open({ contextLength: 512, hotContexts: 2 });
  pool = new NativeAllocator({ shape: engine.fingerprint.shape, blockCount: 256, backend: 'cpu' });
});

afterAll(async () => {
  await engine?.close();
  pool?.close();
});

/** A kvfabric context: token ids beside the pool's pages, and the fingerprint recorded with them. */
class PooledContext {
  tokens = new Uint32Array(0);
  fingerprint: EngineFingerprint | undefined;
  loads = 0;
  constructor(readonly handle: ContextHandle = pool.createContext(TENANT)) {}

  stored(): StoredContext {
    return {
      tokens: this.tokens,
      ...(this.fingerprint ? { fingerprint: this.fingerprint } : {}),
      loadKv: async () => {
        this.loads++;
        return pool.read(this.handle, 0, this.tokens.length);
      },
    };
  }

  absorb(result: EngineTurnResult): void {
    pool.append(this.handle, result.appended.kv);
    const tokens = new Uint32Array(this.tokens.length + result.appended.tokens.length);
    tokens.set(this.tokens);
    tokens.set(result.appended.tokens, this.tokens.length);
    this.tokens = tokens;
    this.fingerprint = engine.fingerprint;
  }

  fork(): PooledContext {
    const child = new PooledContext(pool.fork(this.handle));
    child.tokens = this.tokens;
    child.fingerprint = this.fingerprint;
    return child;
  }
}

async function turn(key: string, context: PooledContext, input: string): Promise<EngineTurnResult> {
  const result = await engine.turn({ key, context: context.stored(), input, generation: { maxTokens: MAX_TOKENS } });
  expect(result.appended.kv.length).toBe(result.appended.tokens.length * 23_040);
  context.absorb(result);
  return result;
}

function expectSameTurn(a: EngineTurnResult, b: EngineTurnResult): void {
  expect(b.reply).toBe(a.reply);
  expect(Array.from(b.appended.tokens)).toEqual(Array.from(a.appended.tokens));
  expectSameBytes(b.appended.kv, a.appended.kv);
}

async function expectCode(promise: Promise<unknown>, code: string): Promise<FabricError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FabricError);
  expect((err as FabricError).code).toBe(code);
  return err as FabricError;
}

describe('LlamaEngine', () => {
  it('fingerprints the model, the attention path, f16 K/V and the shape from GGUF metadata', () => {
    expect(engine.fingerprint).toMatchObject({
      engine: 'llama.cpp',
      modelSha256: 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53',
      flashAttention: true,
      kType: 'f16',
      vType: 'f16',
      shape: { layers: 30, kvHeads: 3, headDim: 64, dtypeBytes: 2 },
      contextLength: 512,
    });
    expect(pool.layout.bytesPerToken).toBe(23_040);
  });

  it('a conversation restored from kvfabric pages after the engine let go continues exactly like an uninterrupted one', async () => {
    const straight = new PooledContext();
    const straightTurns: EngineTurnResult[] = [];
    for (const message of MESSAGES) straightTurns.push(await turn('straight', straight, message));
    expect(straightTurns.map((t) => t.resumedFrom)).toEqual(['empty', 'hot', 'hot']);
    expect(straight.loads).toBe(0);
    // The context's tokens are exactly those whose KV kvfabric holds: prompt, reply and closing tokens.
    for (const t of straightTurns) expect(t.appended.tokens.length).toBeGreaterThanOrEqual(t.promptTokens + t.replyTokens);

    const restored = new PooledContext();
    expectSameTurn(straightTurns[0]!, await turn('restored', restored, MESSAGES[0]!));
    for (let k = 1; k < MESSAGES.length; k++) {
      await engine.release('restored');
      const next = await turn('restored', restored, MESSAGES[k]!);
      expect(next.resumedFrom).toBe('stored');
      expectSameTurn(straightTurns[k]!, next);
    }
    expect(restored.loads).toBe(MESSAGES.length - 1);
    // Every byte kvfabric holds is the uninterrupted run's.
    expectSameBytes(pool.read(restored.handle, 0, restored.tokens.length), pool.read(straight.handle, 0, straight.tokens.length));
    await engine.release('straight');
    await engine.release('restored');
  });

  it('two forks of a stored prefix, with different messages, each equal a fresh run over that prefix', async () => {
    const prefix = new PooledContext();
    await turn('prefix', prefix, MESSAGES[0]!);
    await engine.release('prefix');
    const forks = [prefix.fork(), prefix.fork()];
    const forked = [await turn('fork-a', forks[0]!, 'Say yes.'), await turn('fork-b', forks[1]!, 'Say no.')];
    expect(forked.map((t) => t.resumedFrom)).toEqual(['stored', 'stored']);
    expect(pool.contextStats(forks[0]!.handle).sharedBlocks).toBeGreaterThan(0);

    for (const [i, message] of ['Say yes.', 'Say no.'].entries()) {
      const fresh = new PooledContext();
      await turn(`fresh-${i}`, fresh, MESSAGES[0]!);
      expectSameTurn(forked[i]!, await turn(`fresh-${i}`, fresh, message));
      await engine.release(`fresh-${i}`);
    }
    expect(Array.from(forked[0]!.appended.tokens)).not.toEqual(Array.from(forked[1]!.appended.tokens));
    await engine.release('fork-a');
    await engine.release('fork-b');
  });

  it('a context of another model or setting is INCOMPATIBLE before anything is loaded, and the engine goes on', async () => {
    const context = new PooledContext();
    await turn('foreign', context, MESSAGES[0]!);
    await engine.release('foreign');
    const stored = context.stored();
    for (const fingerprint of [
      { ...engine.fingerprint, modelSha256: '0'.repeat(64) },
      { ...engine.fingerprint, flashAttention: false },
      { ...engine.fingerprint, vType: 'q8_0' },
      { ...engine.fingerprint, shape: { ...engine.fingerprint.shape, layers: 32 } },
    ]) {
      await expectCode(engine.turn({ key: 'foreign', context: { ...stored, fingerprint }, input: 'Hi.' }), 'INCOMPATIBLE');
    }
    expect(context.loads).toBe(0);
    const after = await turn('foreign', context, MESSAGES[1]!);
    expect(after.resumedFrom).toBe('stored');
    await engine.release('foreign');
  });

  it('a turn that would pass the context length is OUT_OF_RANGE and changes nothing, hot copy included', async () => {
    const context = new PooledContext();
    await turn('long', context, MESSAGES[0]!);
    const tokensBefore = context.tokens;
    const err = await expectCode(engine.turn({ key: 'long', context: context.stored(), input: 'word '.repeat(600) }), 'OUT_OF_RANGE');
    expect(err.message).toMatch(/context length is 512/);
    await expectCode(
      engine.turn({ key: 'long', context: context.stored(), input: 'Hi.', generation: { maxTokens: 1000 } }),
      'OUT_OF_RANGE',
    );
    expect(context.tokens).toBe(tokensBefore);
    expect(pool.contextStats(context.handle).tokens).toBe(tokensBefore.length);
    // Still hot: nothing was evicted or evaluated.
    expect((await turn('long', context, MESSAGES[1]!)).resumedFrom).toBe('hot');
    await engine.release('long');
  });

  it('corrupted stored contexts are typed errors, never a crash: wrong KV length, token ids outside the vocabulary', async () => {
    const context = new PooledContext();
    await turn('corrupt', context, MESSAGES[0]!);
    await engine.release('corrupt');
    const stored = context.stored();
    const kv = pool.read(context.handle, 0, context.tokens.length);
    await expectCode(
      engine.turn({ key: 'corrupt', context: { ...stored, loadKv: async () => kv.subarray(1) }, input: 'Hi.' }),
      'INTEGRITY',
    );
    const badTokens = Uint32Array.from(context.tokens);
    badTokens[3] = 0x7fffffff;
    await expectCode(engine.turn({ key: 'corrupt', context: { ...stored, tokens: badTokens }, input: 'Hi.' }), 'INTEGRITY');
    await expectCode(engine.turn({ key: 'corrupt', context: { ...stored, fingerprint: undefined }, input: 'Hi.' }), 'INVALID_ARGUMENT');
    // A store that fails to read is the engine's UNAVAILABLE, as often as it happens: nothing leaks.
    for (let i = 0; i < 3; i++) {
      await expectCode(
        engine.turn({
          key: `unreadable-${i}`,
          context: {
            ...stored,
            loadKv: async () => {
              throw new Error('disk gone');
            },
          },
          input: 'Hi.',
        }),
        'UNAVAILABLE',
      );
    }
    // The engine is fine afterwards.
    expect((await turn('corrupt', context, MESSAGES[1]!)).resumedFrom).toBe('stored');
    await engine.release('corrupt');
  });

  it('keeps at most hotContexts sequences hot, evicting the least recently used (kvfabric has every byte anyway)', async () => {
    const contexts = [new PooledContext(), new PooledContext(), new PooledContext()];
    for (const [i, context] of contexts.entries()) await turn(`lru-${i}`, context, MESSAGES[0]!);
    // lru-0 was evicted for lru-2; lru-2 is still hot.
    expect((await turn('lru-2', contexts[2]!, MESSAGES[1]!)).resumedFrom).toBe('hot');
    expect((await turn('lru-0', contexts[0]!, MESSAGES[1]!)).resumedFrom).toBe('stored');
    for (const i of [0, 1, 2]) await engine.release(`lru-${i}`);
  });

  it('a second turn of a key while one runs is BUSY; turns of different keys run side by side', async () => {
    const [a, b] = [new PooledContext(), new PooledContext()];
    const first = turn('busy-a', a, MESSAGES[0]!);
    await expectCode(engine.turn({ key: 'busy-a', context: new PooledContext().stored(), input: 'Hi.' }), 'BUSY');
    const [ra, rb] = await Promise.all([first, turn('busy-b', b, MESSAGES[0]!)]);
    expectSameTurn(ra, rb);
    for (const key of ['busy-a', 'busy-b']) await engine.release(key);
  });

  it('seeded sampling repeats exactly', async () => {
    const results: ContextKv[] = [];
    for (const key of ['seeded-a', 'seeded-b']) {
      const result = await engine.turn({
        key,
        context: new PooledContext().stored(),
        input: MESSAGES[2]!,
        generation: { maxTokens: MAX_TOKENS, temperature: 0.9, seed: 42 },
      });
      results.push(result.appended);
      await engine.release(key);
    }
    expect(Array.from(results[1]!.tokens)).toEqual(Array.from(results[0]!.tokens));
  });
});
