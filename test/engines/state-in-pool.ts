// A sequence-state file for token ids and token-major rows, laid out the way the llama engine has it laid
// out: the rows appended to a real pool, then written by the allocator into a memory file from the pages.
import fs from 'node:fs';

import { createMemoryFile, NativeAllocator } from '../../src/fabric';
import { GGML_TYPES, sequenceStatePieces, type SequenceStateShape, type StateLayout } from '../../src/engines/llama/sequence-state';

export async function stateFromPool(
  tokens: Uint32Array,
  kv: Uint8Array,
  shape: SequenceStateShape,
  layout: StateLayout,
): Promise<Uint8Array> {
  const { layers, kvHeads, headDim } = shape;
  const pool = new NativeAllocator({
    shape: { layers, kvHeads, headDim, dtypeBytes: GGML_TYPES[shape.kType].bytes },
    blockCount: Math.ceil(tokens.length / 16) + 1,
    backend: 'cpu',
  });
  const file = createMemoryFile('kvfabric-test-state');
  try {
    const context = pool.createContext(1);
    pool.append(context, kv);
    const length = await pool.writePlaneMajorAsync(context, file, 0, tokens.length, sequenceStatePieces(tokens, shape, layout));
    return new Uint8Array(fs.readFileSync(file.path).subarray(0, length));
  } finally {
    file.close();
    pool.close();
  }
}
