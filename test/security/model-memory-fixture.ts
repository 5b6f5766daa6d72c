// memory-fixture.ts's AgentMemory with the real model behind it: a LlamaEngine on a state directory of
// its own, both in temporary directories that close() removes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { emptyDigest, type DigestState } from '../../src/agent-memory/context-digest';
import type { TurnResult } from '../../src/agent-memory/operation-results';
import { LlamaEngine } from '../../src/engines/llama/llama-engine';
import { openMemory, type MemoryFixture } from './memory-fixture';

/** A message turn as the agent's workflow asks for it; the first turn of an empty context by default. */
export interface SayOptions {
  turn?: number;
  before?: DigestState;
  tail?: number[];
  tenant?: string;
  maxTokens?: number;
  sharing?: 'tenant' | 'none';
}

export interface ModelMemoryFixture {
  fx: MemoryFixture;
  engine: LlamaEngine;
  /** The engine's state directory: nothing may be left in it. */
  stateDir: string;
  /** The tier directory (cold tier, records). */
  dir: string;
  /** A message turn on `agentId`'s context, presented with `token`, no checkpoint. */
  say(agentId: string, token: string, message: string, options?: SayOptions): Promise<TurnResult>;
  close(): Promise<void>;
}

/** `tierDir`: a tier directory another fixture shares (a second worker's), left for its opener to remove. */
export async function openModelMemory(
  name: string,
  engineOptions: { contextLength: number; hotContexts: number; threads?: number; batchSize?: number },
  memoryOptions: Parameters<typeof openMemory>[1] = {},
  tierDir?: string,
): Promise<ModelMemoryFixture> {
  const dir = tierDir ?? mkdtempSync(join(tmpdir(), `kvfabric-${name}-`));
  const stateDir = mkdtempSync(join(tmpdir(), `kvfabric-${name}-state-`));
  const engine = await LlamaEngine.open({ ...engineOptions, stateDir });
  const fx = await openMemory(dir, { ...memoryOptions, engine });
  return {
    fx,
    engine,
    stateDir,
    dir,
    say: (agentId, token, message, { turn = 0, before = emptyDigest(), tail = [], tenant = 'acme', maxTokens = 8, sharing } = {}) =>
      fx.memory.turn(fx.call(agentId, tenant, 'turn', token), {
        turn,
        message,
        generation: { maxTokens },
        before,
        tail,
        checkpoint: false,
        ...(sharing ? { sharing } : {}),
      }),
    async close() {
      await fx.close();
      await engine.close();
      if (tierDir === undefined) rmSync(dir, { recursive: true, force: true });
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
