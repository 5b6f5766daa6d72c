// The llama engine holds a context to the length it was asked for, with the real default model: llama.cpp
// pads its cache to a multiple of 256 cells, and before this a worker started with --context-length 64
// served a 177-token turn without a word. A length the model was not trained for is refused at open.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { LlamaEngine } from '../../src/engines/llama/llama-engine';

describe('the llama engine context length', () => {
  let engine: LlamaEngine;

  beforeAll(async () => {
    engine = await LlamaEngine.open({ contextLength: 64, hotContexts: 1 });
  });
  afterAll(async () => engine?.close());

  it('records the length asked for, not the padded one', () => {
    expect(engine.fingerprint.contextLength).toBe(64);
  });

  it('refuses a turn that would pass it with OUT_OF_RANGE, and then serves one that fits', async () => {
    const context = { tokens: new Uint32Array(0), writeKv: async () => 0 };
    const long = 'Tell me everything about bridges, their history, materials, loads, spans and failures. '.repeat(3);
    await expect(engine.turn({ key: 'long', context, input: long, generation: { maxTokens: 16 } })).rejects.toMatchObject({
      name: 'FabricError',
      code: 'OUT_OF_RANGE',
      message: expect.stringMatching(/the context length is 64$/),
    });
    // The refusal held nothing back: a turn that fits runs on the same engine.
    const fits = await engine.turn({ key: 'short', context, input: 'Hi.', generation: { maxTokens: 4 } });
    expect(fits.added.length).toBeLessThanOrEqual(64);
  });
});

it('refuses a context length above what the model was trained for, naming both', async () => {
  await expect(LlamaEngine.open({ contextLength: 1_000_000 })).rejects.toMatchObject({
    name: 'FabricError',
    code: 'INVALID_ARGUMENT',
    message: expect.stringMatching(
      /^context length \(--context-length, contextLength\) 1000000 is more than the model was trained for \(\d+ tokens\): ask for at most \d+$/,
    ),
  });
});
