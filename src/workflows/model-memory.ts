// For workflow code whose AI SDK model calls run on kvfabric's provider (docs/ai-sdk.md): frees the run's
// KV now, instead of when the run ends (the workers' housekeeping frees it then). Import it from
// 'kvfabric/workflows/model-memory'; a kvfabric worker with a model serves the activity.
import { proxyActivities } from '@temporalio/workflow';

export interface ModelMemoryActivities {
  /** Frees the calling run's KV; false when there was none. */
  kvfabricReleaseModelMemory(): Promise<boolean>;
}

export function releaseModelMemory(): Promise<boolean> {
  const { kvfabricReleaseModelMemory } = proxyActivities<ModelMemoryActivities>({ startToCloseTimeout: '1 minute' });
  return kvfabricReleaseModelMemory();
}
