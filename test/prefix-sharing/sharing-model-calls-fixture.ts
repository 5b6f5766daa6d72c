// kvfabric's AI SDK language model over the real model, pool, tiers and cold tier, sharing prefixes within
// a tenant (a namespace) as a worker does, at the batch settings that make whole and continued evaluations
// identical (one thread, 32 tokens a pass: docs/ai-sdk.md#identical-replies). Each call runs in the SDK's
// own activity context (MockActivityEnvironment) for the run it names; close() removes its directory.
import type { LanguageModelV4CallOptions, LanguageModelV4GenerateResult } from '@ai-sdk/provider';

import type { ModelCallMemory } from '../../src/ai-sdk/model-call-memory';
import type { ModelCallOwner } from '../../src/ai-sdk/model-call-owner';
import type { LlamaEngine } from '../../src/engines/llama/llama-engine';
import type { NativeAllocator } from '../../src/fabric';
import type { TieredMemory } from '../../src/tiers/tiered-memory';
import { openModelCalls } from '../ai-sdk/model-call-fixture';

export interface SharingModelCalls {
  engine: LlamaEngine;
  pool: NativeAllocator;
  tiers: TieredMemory;
  memory: ModelCallMemory;
  /** One model call as an activity of `owner`'s run, its write-behind waited for. */
  generate(owner: ModelCallOwner, options: LanguageModelV4CallOptions): Promise<LanguageModelV4GenerateResult>;
  close(): Promise<void>;
}

/** A run of workflow `ticket-<id>` in `namespace`, its tenant. */
export const runOf = (namespace: string, id: string): ModelCallOwner => ({
  namespace,
  workflowId: `ticket-${id}`,
  runId: `run-${id}`,
  tenant: namespace,
});

/** What a call's provider metadata says it reused, evaluated and took from its tenant's shared prefixes. */
export function figuresOf(result: LanguageModelV4GenerateResult): { reused: number; evaluated: number; shared: number } {
  const { reusedTokens, evaluatedTokens, sharedTokens } = result.providerMetadata!.kvfabric as Record<string, number>;
  return { reused: reusedTokens!, evaluated: evaluatedTokens!, shared: sharedTokens! };
}

export async function openSharingModelCalls(name: string): Promise<SharingModelCalls> {
  const fixture = await openModelCalls(name, { engine: { hotContexts: 4, threads: 1, batchSize: 32 }, sharing: true });
  return {
    ...fixture,
    async generate(owner, options) {
      const result = (await fixture.as(owner, () => fixture.model.doGenerate(options))) as LanguageModelV4GenerateResult;
      await fixture.memory.settled();
      return result;
    },
  };
}
