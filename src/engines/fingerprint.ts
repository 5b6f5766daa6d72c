// What produced a context's KV bytes, recorded beside each context: bytes are only meaningful to the
// same model run the same way, and llama.cpp may crash the process on a foreign state, so an engine
// compares fingerprints before it loads anything.
import { FabricError } from '../fabric/errors';
import type { ModelShape } from '../fabric/types';

export interface EngineFingerprint {
  /** e.g. `llama.cpp`. */
  engine: string;
  /** Engine build, e.g. `node-llama-cpp 3.22.1 (llama.cpp v0.5.0)`. Recorded, not compared (see below). */
  version: string;
  /** SHA-256 of the model file (hex). */
  modelSha256: string;
  flashAttention: boolean;
  /** Element types of K and V in the engine's cache: rows hold them as they are. */
  kType: string;
  vType: string;
  shape: ModelShape;
  /** Tokens one context may hold. Recorded; a context fits any engine whose length is at least its size. */
  contextLength: number;
}

/**
 * INCOMPATIBLE unless bytes recorded under `recorded` mean the same to the engine `current`: same engine,
 * model, attention path, K/V types and shape. The version is not compared: a state's rows are plain K/V
 * values of the model, which a newer build reads the same way; the shape check catches layout changes.
 */
export function requireCompatible(recorded: EngineFingerprint, current: EngineFingerprint): void {
  const differences: string[] = [];
  const compare = (what: string, a: unknown, b: unknown) => {
    if (a !== b) differences.push(`${what} ${String(a)} vs ${String(b)}`);
  };
  compare('engine', recorded.engine, current.engine);
  compare('model', recorded.modelSha256, current.modelSha256);
  compare('flash attention', recorded.flashAttention, current.flashAttention);
  compare('K type', recorded.kType, current.kType);
  compare('V type', recorded.vType, current.vType);
  for (const field of ['layers', 'kvHeads', 'headDim', 'dtypeBytes'] as const) {
    compare(`shape.${field}`, recorded.shape?.[field], current.shape[field]);
  }
  if (differences.length > 0) {
    throw new FabricError('INCOMPATIBLE', `context was produced by another engine setting: ${differences.join(', ')}`);
  }
}
