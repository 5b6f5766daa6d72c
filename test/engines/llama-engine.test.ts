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

/**
 * A kvfabric context: token ids beside the pool's pages, and the fingerprint recorded with them. `tail`:
 * token ids of turns whose KV was never saved into the pages (their worker died first).
 */
class PooledContext {
  tokens = new Uint32Array(0);
  tail: Uint32Array = new Uint32Array(0);
  fingerprint: EngineFingerprint | undefined;
  loads = 0;
  constructor(readonly handle: ContextHandle = pool.createContext(TENANT)) {}

  stored(): StoredContext {
    const all = new Uint32Array(this.tokens.length + this.tail.length);
    all.set(this.tokens);
    all.set(this.tail, this.tokens.length);
    return {
      tokens: all,
      storedTokens: this.tokens.length,
      ...(this.fingerprint ? { fingerprint: this.fingerprint } : {}),
      writeKv: async (file, pieces) => {
        this.loads++;
        return pool.writePlaneMajorAsync(this.handle, file, 0, this.tokens.length, pieces);
      },
    };
  }

  /** The engine's save of everything after the pages, appended to them. */
  appendSaved(saved: ContextKv): void {
    pool.append(this.handle, saved.kv);
    const tokens = new Uint32Array(this.tokens.length + saved.tokens.length);
    tokens.set(this.tokens);
    tokens.set(saved.tokens, this.tokens.length);
    this.tokens = tokens;
    this.tail = new Uint32Array(0);
    this.fingerprint = engine.fingerprint;
  }

  fork(): PooledContext {
    const child = new PooledContext(pool.fork(this.handle));
    child.tokens = this.tokens;
    child.fingerprint = this.fingerprint;
    return child;
  }
}

/** A turn and, as kvfabric's write-behind does after it, the engine's save of its KV into the pages. */
interface SavedTurn extends EngineTurnResult {
  saved: ContextKv;
}

async function turn(key: string, context: PooledContext, input: string): Promise<SavedTurn> {
  const stored = context.tokens.length;
  const result = await engine.turn({ key, context: context.stored(), input, generation: { maxTokens: MAX_TOKENS } });
  const saved = await engine.save(key, stored);
  // The save hands over everything after the pages: an unsaved tail, then exactly the turn's tokens.
  expect(Array.from(saved.tokens.subarray(context.tail.length))).toEqual(Array.from(result.added));
  expect(saved.kv.length).toBe(saved.tokens.length * 23_040);
  context.appendSaved(saved);
  return { ...result, saved };
}

function expectSameTurn(a: SavedTurn, b: SavedTurn): void {
  expect(b.reply).toBe(a.reply);
  expect(Array.from(b.added)).toEqual(Array.from(a.added));
  expectSameBytes(
    b.saved.kv.subarray(b.saved.kv.length - b.added.length * 23_040),
    a.saved.kv.subarray(a.saved.kv.length - a.added.length * 23_040),
  );
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
    const straightTurns: SavedTurn[] = [];
    for (const message of MESSAGES) straightTurns.push(await turn('straight', straight, message));
    expect(straightTurns.map((t) => t.resumedFrom)).toEqual(['empty', 'hot', 'hot']);
    expect(straight.loads).toBe(0);
    // The context's tokens are exactly those whose KV kvfabric holds: prompt, reply and closing tokens.
    for (const t of straightTurns) expect(t.added.length).toBeGreaterThanOrEqual(t.promptTokens + t.replyTokens);

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
    expect(Array.from(forked[0]!.added)).not.toEqual(Array.from(forked[1]!.added));
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

  it('corrupted stored contexts are typed errors, never a crash: a state of the wrong length, token ids outside the vocabulary', async () => {
    const context = new PooledContext();
    await turn('corrupt', context, MESSAGES[0]!);
    await engine.release('corrupt');
    const stored = context.stored();
    // Rows of one token fewer make a shorter file: refused before llama.cpp sees it.
    const short: StoredContext['writeKv'] = (file, pieces) =>
      pool.writePlaneMajorAsync(context.handle, file, 0, context.tokens.length - 1, pieces);
    await expectCode(engine.turn({ key: 'corrupt', context: { ...stored, writeKv: short }, input: 'Hi.' }), 'INTEGRITY');
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
            writeKv: async () => {
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

  it('answers before its closing tokens go in: a turn, save, release or eviction right after waits for them, refused by nothing', async () => {
    const straight = new PooledContext();
    const straightTurns: SavedTurn[] = [];
    for (const message of MESSAGES) straightTurns.push(await turn('closing-straight', straight, message));
    await engine.release('closing-straight');

    // Each turn the moment the last one answered, nothing saved in between: the engine's hot copy goes on.
    const quick = new PooledContext();
    const quickTurn = async (input: string) => {
      const result = await engine.turn({ key: 'closing-quick', context: quick.stored(), input, generation: { maxTokens: MAX_TOKENS } });
      quick.tail = Uint32Array.from([...quick.tail, ...result.added]);
      quick.fingerprint = engine.fingerprint;
      return result;
    };
    const first = await quickTurn(MESSAGES[0]!);
    expect(first.resumedFrom).toBe('empty');
    const second = await quickTurn(MESSAGES[1]!);
    expect(second.resumedFrom).toBe('hot');
    expect(second.reply).toBe(straightTurns[1]!.reply);
    // A save right after an answer holds the whole turn, its closing tokens and their KV included.
    const saved = await engine.save('closing-quick', 0);
    expect(Array.from(saved.tokens)).toEqual(Array.from(quick.tail));
    expectSameBytes(saved.kv, Buffer.concat([straightTurns[0]!.saved.kv, straightTurns[1]!.saved.kv]));
    quick.appendSaved(saved);

    // A release right after an answer, then the next turn from the pages and the unsaved tail.
    const third = await quickTurn(MESSAGES[2]!);
    expect(third.reply).toBe(straightTurns[2]!.reply);
    await engine.release('closing-quick');
    const again = await engine.turn({ key: 'closing-quick', context: quick.stored(), input: 'Name a tree.', generation: { maxTokens: 4 } });
    expect(again.resumedFrom).toBe('stored');

    // Two other contexts right after (hotContexts is 2): one evicts closing-quick while its closing tokens may still be going in.
    const others = await Promise.all(
      ['closing-other-a', 'closing-other-b'].map((key) =>
        engine.turn({ key, context: new PooledContext().stored(), input: MESSAGES[0]!, generation: { maxTokens: MAX_TOKENS } }),
      ),
    );
    expect(others[1]!.reply).toBe(others[0]!.reply);
    for (const key of ['closing-quick', 'closing-other-a', 'closing-other-b']) await engine.release(key);
  });

  it('seeded sampling repeats exactly', async () => {
    const results: Uint32Array[] = [];
    for (const key of ['seeded-a', 'seeded-b']) {
      const result = await engine.turn({
        key,
        context: new PooledContext().stored(),
        input: MESSAGES[2]!,
        generation: { maxTokens: MAX_TOKENS, temperature: 0.9, seed: 42 },
      });
      results.push(result.added);
      await engine.release(key);
    }
    expect(Array.from(results[1]!)).toEqual(Array.from(results[0]!));
  });

  it('a turn whose KV was never saved (its worker died) is evaluated again from its token ids: the conversation goes on byte for byte', async () => {
    const straight = new PooledContext();
    const straightTurns: SavedTurn[] = [];
    for (const message of MESSAGES) straightTurns.push(await turn('tail-straight', straight, message));

    const rebuilt = new PooledContext();
    await turn('tail-rebuilt', rebuilt, MESSAGES[0]!);
    // Turn 2 answers, and its worker dies before the save: only its token ids survive (the workflow's tail).
    const lost = await engine.turn({
      key: 'tail-rebuilt',
      context: rebuilt.stored(),
      input: MESSAGES[1]!,
      generation: { maxTokens: MAX_TOKENS },
    });
    expect(lost.reply).toBe(straightTurns[1]!.reply);
    await engine.release('tail-rebuilt');
    rebuilt.tail = lost.added;
    const third = await turn('tail-rebuilt', rebuilt, MESSAGES[2]!);
    expect(third.resumedFrom).toBe('stored');
    expectSameTurn(straightTurns[2]!, third);
    // The pages now hold the lost turn's KV too, as the uninterrupted run made it.
    expectSameBytes(pool.read(rebuilt.handle, 0, rebuilt.tokens.length), pool.read(straight.handle, 0, straight.tokens.length));
    await engine.release('tail-straight');
    await engine.release('tail-rebuilt');
  });

  it('load() makes a stored context hot, so the next turn pays only its own model time', async () => {
    const context = new PooledContext();
    await turn('warm', context, MESSAGES[0]!);
    await engine.release('warm');
    expect(await engine.load('warm', context.stored())).toBe('stored');
    expect(await engine.load('warm', context.stored())).toBe('hot');
    expect(context.loads).toBe(1);
    expect((await turn('warm', context, MESSAGES[1]!)).resumedFrom).toBe('hot');
    await engine.release('warm');
  });

  it('save() of a context the engine does not hold is INVALID_STATE; from past its end, OUT_OF_RANGE', async () => {
    await expectCode(engine.save('never-seen', 0), 'INVALID_STATE');
    const context = new PooledContext();
    await turn('save-range', context, MESSAGES[0]!);
    await expectCode(engine.save('save-range', context.tokens.length + 1), 'OUT_OF_RANGE');
    expect((await engine.save('save-range', context.tokens.length)).tokens.length).toBe(0);
    await engine.release('save-range');
  });

  it('evicts a context whose KV is saved before one whose turn is not', async () => {
    const [saved, unsaved, next] = [new PooledContext(), new PooledContext(), new PooledContext()];
    await engine.turn({ key: 'evict-unsaved', context: unsaved.stored(), input: MESSAGES[0]!, generation: { maxTokens: MAX_TOKENS } });
    await turn('evict-saved', saved, MESSAGES[0]!);
    // The unsaved one is the least recently used; a third context takes the saved one's place all the same...
    await turn('evict-next', next, MESSAGES[0]!);
    await expectCode(engine.save('evict-saved', 0), 'INVALID_STATE');
    // ...and the unsaved one's KV can still be handed over.
    expect((await engine.save('evict-unsaved', 0)).tokens.length).toBeGreaterThan(0);
    for (const key of ['evict-saved', 'evict-unsaved', 'evict-next']) await engine.release(key);
  });
});
