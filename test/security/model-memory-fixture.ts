// memory-fixture.ts's AgentMemory with the real model behind it: a LlamaEngine on a state directory of
// its own, both in temporary directories that close() removes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { LlamaEngine } from '../../src/engines/llama/llama-engine';
import { openMemory, type MemoryFixture } from './memory-fixture';

export interface ModelMemoryFixture {
  fx: MemoryFixture;
  engine: LlamaEngine;
  /** The engine's state directory: nothing may be left in it. */
  stateDir: string;
  close(): Promise<void>;
}

export async function openModelMemory(
  name: string,
  engineOptions: { contextLength: number; hotContexts: number },
): Promise<ModelMemoryFixture> {
  const dir = mkdtempSync(join(tmpdir(), `kvfabric-${name}-`));
  const stateDir = mkdtempSync(join(tmpdir(), `kvfabric-${name}-state-`));
  const engine = await LlamaEngine.open({ ...engineOptions, stateDir });
  const fx = await openMemory(dir, { engine });
  return {
    fx,
    engine,
    stateDir,
    async close() {
      await fx.close();
      await engine.close();
      rmSync(dir, { recursive: true, force: true });
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
