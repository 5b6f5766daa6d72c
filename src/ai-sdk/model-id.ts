// The model ids kvfabric serves, apart from the provider so that workflow code (model-call-timeouts.ts)
// can tell kvfabric's model calls without importing the worker-side provider.

export const KVFABRIC_MODEL_ID = 'kvfabric';

export function isKvFabricModelId(modelId: string): boolean {
  return modelId === KVFABRIC_MODEL_ID || modelId.startsWith(`${KVFABRIC_MODEL_ID}:`);
}
