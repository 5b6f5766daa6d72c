// The baseline the AI SDK tests and bench set kvfabric against: the same engine, model and chat
// rendering, but no KV kept between calls, as a provider that sends each call to a model server without a
// cache gets. Every call evaluates its whole prompt in a sequence of its own. Its prompts are kvfabric's
// token for token (a reply goes back as the ids it was generated as), so the two differ only in the KV
// kept, and greedy decoding must give the same replies.
import type { LanguageModelV4, ProviderV4 } from '@ai-sdk/provider';
import { randomBytes, randomUUID } from 'node:crypto';

import { CarriedReplyIds } from '../../src/ai-sdk/carried-reply-ids';
import { KvFabricLanguageModel } from '../../src/ai-sdk/kvfabric-language-model';
import type { ModelCalls } from '../../src/ai-sdk/model-call-memory';
import { replyIdsIn, type ModelCallNote } from '../../src/ai-sdk/model-call-note';
import { modelCallContextId } from '../../src/ai-sdk/model-call-owner';
import type { Engine } from '../../src/engines/engine';
import { KeyRing } from '../../src/tiers/cold/key-ring';

export function plainModelCalls(engine: Engine): ModelCalls {
  const repliesOf = new Map<string, ModelCallNote['replies']>();
  return {
    // A key of its own: the baseline's carried ids count on it alone.
    carriedReplies: new CarriedReplyIds(new KeyRing([{ id: 'plain', key: randomBytes(32) }], 'plain')),
    async complete(owner, request) {
      const key = `plain-${randomUUID()}`;
      const contextId = modelCallContextId(owner);
      const replies = repliesOf.get(contextId) ?? [];
      const prompt = engine.renderConversation(request.messages(replyIdsIn(replies)));
      try {
        const result = await engine.complete({
          key,
          context: { tokens: new Uint32Array(0), writeKv: async () => 0 },
          prompt,
          ...(request.generation ? { generation: request.generation } : {}),
          ...(request.structured ? { structured: request.structured } : {}),
          ...(request.onText ? { onText: request.onText } : {}),
          ...(request.signal ? { signal: request.signal } : {}),
        });
        repliesOf.set(contextId, [...replies, { text: request.replyText(result.text), ids: Array.from(result.reply) }]);
        return { ...result, contextId };
      } finally {
        await engine.release(key);
      }
    },
  };
}

/** A provider whose every language model runs on `calls`. */
export function providerOf(calls: ModelCalls): ProviderV4 {
  const unsupported = (what: string) => (): never => {
    throw new Error(`the plain provider has no ${what}`);
  };
  return {
    specificationVersion: 'v4',
    languageModel: (modelId: string): LanguageModelV4 => new KvFabricLanguageModel(modelId, () => calls),
    embeddingModel: unsupported('embedding model'),
    imageModel: unsupported('image model'),
  };
}
