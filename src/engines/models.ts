// The model catalog: the shapes agents are started with (AgentClient.start's `model`, `kvfabric start
// --model`) and workers make their pools for (a worker's --model). A pool is made for one shape; an agent
// of another shape is refused at allocation (INVALID_ARGUMENT), so clients and workers name models from
// this one list. Exported from `kvfabric/client`, so a workflow of yours that builds an AgentInput takes
// its model there.
import { FabricError } from '../fabric/errors';
import type { ModelShape } from '../fabric/types';

/** A model as an agent names it: its KV shape and the tokens per block its contexts are paged in. */
export interface AgentModel {
  /** For people: shown in the memo and the UI. */
  name: string;
  shape: ModelShape;
  tokensPerBlock: number;
}

export const MODELS: Readonly<Record<string, AgentModel>> = {
  // 32 layers x 2 x 8 KV heads x 128 x fp16 = 128 KiB per token, 2 MiB per 16-token block.
  'llama-3-8b': { name: 'llama-3-8b', shape: { layers: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 }, tokensPerBlock: 16 },
  // SmolLM2-135M-Instruct (the default model of llama.cpp workers): 30 layers x 2 x 3 KV heads x 64 x f16 =
  // 23,040 bytes per token.
  'smollm2-135m': { name: 'smollm2-135m', shape: { layers: 30, kvHeads: 3, headDim: 64, dtypeBytes: 2 }, tokensPerBlock: 16 },
  // 256 bytes per token: the shape of tests, where only the bookkeeping matters.
  tiny: { name: 'tiny', shape: { layers: 2, kvHeads: 2, headDim: 16, dtypeBytes: 2 }, tokensPerBlock: 16 },
};

/** A catalog name, or a custom shape `LAYERSxKVHEADSxHEADDIMxDTYPEBYTES[/TOKENSPERBLOCK]` (e.g. 32x8x128x2/16). */
export function modelNamed(name: string): AgentModel {
  const known = MODELS[name];
  if (known) return known;
  const custom = /^(\d+)x(\d+)x(\d+)x(\d+)(?:\/(\d+))?$/.exec(name);
  if (!custom) throw new FabricError('INVALID_ARGUMENT', `unknown model '${name}': use ${Object.keys(MODELS).join(', ')} or LxHxDxB[/T]`);
  const [layers, kvHeads, headDim, dtypeBytes, tokensPerBlock] = custom.slice(1).map((v) => (v === undefined ? undefined : Number(v)));
  const shape: ModelShape = { layers: layers!, kvHeads: kvHeads!, headDim: headDim!, dtypeBytes: dtypeBytes! };
  return { name, shape, tokensPerBlock: tokensPerBlock ?? 16 };
}
