// AI SDK agents on Temporal keeping their KV: kvfabric's model provider for @temporalio/ai-sdk (docs/ai-sdk.md).
export { KvFabricProvider, KVFABRIC_MODEL_ID, isKvFabricModelId, type KvFabricProviderOptions } from './kvfabric-provider';
export { KvFabricLanguageModel } from './kvfabric-language-model';
export { CarriedReplyIds } from './carried-reply-ids';
export {
  ModelCallMemory,
  type ModelCallMemoryOptions,
  type ModelCalls,
  type ModelCallRequest,
  type ModelCallResult,
} from './model-call-memory';
export { modelCallSharingOf, type ModelCallSharing } from './model-call-sharing';
export { modelCallContextId, currentModelCallOwner, type ModelCallOwner } from './model-call-owner';
