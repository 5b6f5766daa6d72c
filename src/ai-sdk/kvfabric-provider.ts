// kvfabric as an AI SDK provider (specification v4), for @temporalio/ai-sdk's AiSdkPlugin on a worker that
// also runs KvFabricWorkerPlugin: `new AiSdkPlugin({ modelProvider: kvfabric.modelProvider() })`. Workflows
// keep calling `temporalProvider.languageModel(id)`; the id `kvfabric` (or `kvfabric:<anything>`, for
// their own bookkeeping) runs the worker's model with the calling run's KV kept. Any other id goes to the
// fallback provider, if one is given, so a worker can serve kvfabric and a hosted model side by side.
import type { EmbeddingModelV4, ImageModelV4, LanguageModelV4, ProviderV4 } from '@ai-sdk/provider';

import { FabricError } from '../fabric/errors';
import { KvFabricLanguageModel } from './kvfabric-language-model';
import type { ModelCalls } from './model-call-memory';
import { KVFABRIC_MODEL_ID, isKvFabricModelId } from './model-id';

/** @experimental Follows @temporalio/ai-sdk, itself experimental. */
export interface KvFabricProviderOptions {
  /** Serves the model ids that are not kvfabric's. */
  fallback?: ProviderV4;
}

export { KVFABRIC_MODEL_ID, isKvFabricModelId };

/** @experimental Follows @temporalio/ai-sdk, itself experimental. */
export class KvFabricProvider implements ProviderV4 {
  readonly specificationVersion = 'v4';

  constructor(
    private readonly memory: () => ModelCalls,
    private readonly options: KvFabricProviderOptions = {},
  ) {}

  languageModel(modelId: string): LanguageModelV4 {
    if (isKvFabricModelId(modelId)) return new KvFabricLanguageModel(modelId, this.memory);
    return this.fallback(modelId).languageModel(modelId);
  }

  embeddingModel(modelId: string): EmbeddingModelV4 {
    return this.fallback(modelId).embeddingModel(modelId);
  }

  imageModel(modelId: string): ImageModelV4 {
    return this.fallback(modelId).imageModel(modelId);
  }

  private fallback(modelId: string): ProviderV4 {
    if (this.options.fallback) return this.options.fallback;
    throw new FabricError(
      'INVALID_ARGUMENT',
      `kvfabric serves the language model '${KVFABRIC_MODEL_ID}'; no fallback provider serves '${modelId}'`,
    );
  }
}
