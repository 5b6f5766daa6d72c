// Why a continued context can reply differently from the same context evaluated whole, and the setting
// that makes it reply the same. llama.cpp's CPU attention takes another kernel for a pass of 64 tokens or
// more (tiled) than for fewer, and the two round differently; a generated reply's tokens are evaluated one
// a pass. So with the default batch (512) the KV of a continued context (a prompt in 512-token passes, a
// reply a token at a time, then the next message) is not bit for bit the KV of one whole evaluation,
// and greedy decoding on it can pick another token where two are close. With a batch under 64, every
// pass takes the same kernel: on one thread, every row matches. The real default model.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { ChatMessage, StoredContext } from '../../src/engines/engine';
import { LlamaEngine } from '../../src/engines/llama/llama-engine';
import { FabricError } from '../../src/fabric';

const EMPTY: StoredContext = { tokens: new Uint32Array(0), writeKv: async () => 0 };
const LOG = Array.from({ length: 14 }, (_, i) => `worker-${i % 4} resumed agent ${i * 7} in ${(i * 13) % 97} ms from the host tier.`).join(
  '\n',
);

let engine: LlamaEngine;

beforeAll(async () => {
  engine = await LlamaEngine.open({ contextLength: 768, hotContexts: 2, threads: 1, batchSize: 32 });
});

afterAll(async () => {
  await engine?.close();
});

describe('a batch under 64 tokens', () => {
  it('gives a continued context, its generated reply included, the KV of the same tokens evaluated whole', async () => {
    const first: ChatMessage[] = [
      { role: 'system', content: 'You read logs and answer in one sentence.' },
      { role: 'user', content: `${LOG}\nWhich agent resumed slowest?` },
    ];
    const asked = await engine.complete({
      key: 'continued',
      context: EMPTY,
      prompt: engine.renderConversation(first),
      generation: { maxTokens: 24 },
    });
    expect(asked.reply.length).toBeGreaterThan(1); // generated a token a pass
    const next = engine.renderConversation([
      ...first,
      { role: 'assistant', content: asked.reply },
      { role: 'user', content: 'And the fastest?' },
    ]);
    expect(next.length).toBeGreaterThan(64); // the whole evaluation has passes the tiled kernel would take by default

    const continued = await engine.complete({ key: 'continued', context: EMPTY, prompt: next, generation: { maxTokens: 24 } });
    const whole = await engine.complete({ key: 'whole', context: EMPTY, prompt: next, generation: { maxTokens: 24 } });
    expect(continued.reusedTokens).toBeGreaterThan(asked.reply.length);
    expect(whole.reusedTokens).toBe(0);
    expect(continued.text).toBe(whole.text);

    const [a, b] = [await engine.save('continued', 0), await engine.save('whole', 0)];
    expect(Array.from(a.tokens)).toEqual(Array.from(b.tokens));
    const row = a.kv.byteLength / a.tokens.length;
    const differing = Array.from(a.tokens.keys()).filter(
      (t) => !Buffer.from(a.kv.subarray(t * row, (t + 1) * row)).equals(b.kv.subarray(t * row, (t + 1) * row)),
    );
    expect(differing).toEqual([]);
  });

  it('refuses a batch size that is not a whole number of tokens', async () => {
    for (const batchSize of [0, -1, 1.5, Number.NaN]) {
      const opening = LlamaEngine.open({ contextLength: 256, batchSize });
      await expect(opening).rejects.toBeInstanceOf(FabricError);
      await expect(opening).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
  });
});
