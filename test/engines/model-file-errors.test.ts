// The model file, named where a user needs it (issue 39): a truncated GGUF (an interrupted download) is
// refused naming its path (before: llama.cpp's `Failed to load model`, no path), and an engine names the
// file its model came from, which the worker's ready line prints. The real default model.
import { closeSync, mkdtempSync, openSync, readSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { modelFile } from '../../src/engines/llama/default-model';
import { readModelInfo } from '../../src/engines/llama/gguf-shape';
import { LlamaEngine } from '../../src/engines/llama/llama-engine';

const dir = mkdtempSync(join(tmpdir(), 'kvfabric-gguf-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The first `bytes` of the default model, as an interrupted download leaves it. */
function truncatedModel(name: string, bytes: number): string {
  const buffer = Buffer.alloc(bytes);
  const fd = openSync(modelFile(), 'r');
  try {
    readSync(fd, buffer, 0, bytes, 0);
  } finally {
    closeSync(fd);
  }
  const path = join(dir, name);
  writeFileSync(path, buffer);
  return path;
}

describe('a truncated GGUF', () => {
  it('is refused naming its path, with what to do', async () => {
    const path = truncatedModel('half.gguf', Math.floor(statSync(modelFile()).size / 2));
    const refused = await LlamaEngine.open({ modelFile: path, contextLength: 256 }).catch((err: unknown) => err);
    expect(refused).toMatchObject({ name: 'FabricError', code: 'UNAVAILABLE' });
    expect((refused as Error).message).toMatch(new RegExp(`^cannot load model file ${path}: .+ \\(a truncated or damaged GGUF\\?`));
  });

  it('cut inside its header, is refused naming its path by the metadata reader too', async () => {
    const path = truncatedModel('header.gguf', 16);
    await expect(readModelInfo(path)).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      message: expect.stringContaining(`cannot read model file ${path}: `),
    });
    const refused = await LlamaEngine.open({ modelFile: path, contextLength: 256 }).catch((err: unknown) => err);
    expect((refused as Error).message).toContain(`cannot load model file ${path}: `);
  });
});

it('an engine names the file its model came from', async () => {
  const engine = await LlamaEngine.open({ contextLength: 256 });
  try {
    expect(engine.modelFile).toBe(modelFile());
  } finally {
    await engine.close();
  }
});
