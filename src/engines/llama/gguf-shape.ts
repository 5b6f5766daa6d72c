// A model's KV shape from its GGUF metadata, so a kvfabric pool can be sized for any model file without
// loading it: layers = block_count, kvHeads = attention.head_count_kv, headDim = attention.key_length
// (else embedding_length / head_count). Models whose K and V differ in width, or whose head counts vary
// by layer, cannot be laid out as kvfabric rows and are UNAVAILABLE.
import type { GgufMetadata } from 'node-llama-cpp';

import { FabricError, isFabricError } from '../../fabric/errors';
import type { ModelShape } from '../../fabric/types';
import { loadNodeLlamaCpp } from './node-llama-cpp';

interface ArchitectureMetadata {
  block_count?: number;
  embedding_length?: number;
  context_length?: number;
  vocab_size?: number;
  attention?: { head_count?: number | number[]; head_count_kv?: number | number[]; key_length?: number; value_length?: number };
}

export interface GgufModelInfo {
  architecture: string;
  shape: ModelShape;
  trainedContextLength: number;
}

/** Shape with f16 elements (dtypeBytes 2), the K/V type the llama engine pins. */
export function modelInfoFromMetadata(metadata: GgufMetadata): GgufModelInfo {
  const architecture = String(metadata.general?.architecture ?? '');
  const arch = (metadata as unknown as Record<string, ArchitectureMetadata | undefined>)[architecture];
  const unsupported = (why: string) => new FabricError('UNAVAILABLE', `model (${architecture || 'unknown architecture'}) ${why}`);
  if (!arch) throw unsupported('has no architecture metadata');
  const heads = arch.attention?.head_count;
  const kvHeads = arch.attention?.head_count_kv ?? heads;
  if (typeof heads !== 'number' || typeof kvHeads !== 'number') throw unsupported('has per-layer head counts');
  const headDim = arch.attention?.key_length ?? (arch.embedding_length ?? 0) / heads;
  const valueDim = arch.attention?.value_length ?? headDim;
  if (valueDim !== headDim) throw unsupported(`has K width ${headDim} and V width ${valueDim}`);
  const layers = arch.block_count;
  if (!Number.isInteger(layers) || !Number.isInteger(headDim) || (layers as number) < 1 || headDim < 1)
    throw unsupported('has no usable layer count or head size');
  return {
    architecture,
    shape: { layers: layers as number, kvHeads, headDim, dtypeBytes: 2 },
    trainedContextLength: arch.context_length ?? 0,
  };
}

/** Reads only the file's metadata (no tensors), e.g. to size a pool before any engine starts. */
export async function readModelInfo(modelFile: string): Promise<GgufModelInfo> {
  const { readGgufFileInfo } = await loadNodeLlamaCpp();
  try {
    const info = await readGgufFileInfo(modelFile, { readTensorInfo: false });
    return modelInfoFromMetadata(info.metadata);
  } catch (err) {
    // The reader's own words, or the metadata's shortcomings (a file cut short reads as missing metadata), name no file.
    throw new FabricError(
      isFabricError(err) ? err.code : 'UNAVAILABLE',
      `cannot read model file ${modelFile}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}
