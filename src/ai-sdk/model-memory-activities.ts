// The activities behind 'kvfabric/workflows/model-memory' (src/workflows/model-memory.ts), registered by
// the worker plugin next to the placement activities, so they run on the queue the run's model calls go
// to. Each is admitted as the run's model calls are: the run is the one the Temporal server says the
// activity belongs to (currentModelCallOwner), never an argument, so a workflow reaches only its own KV, and
// learns nothing of another run's: a wake-up answers for the caller's run alone.
import { withFailureCodes } from '../activities/failures';
import type { TransferDirection } from '../agent-memory/agent-memory';
import { FabricError } from '../fabric/errors';
import type { ModelCallMemory } from './model-call-memory';
import { currentModelCallOwner } from './model-call-owner';
import type { ModelCallPrefetch, ModelCallPrefetchOutcome } from './model-call-prefetch';
import { MODEL_MEMORY_WAKE_ACTIVITY } from './model-call-route';

/** The worker's metrics: kvfabric_prefetch{outcome} and kvfabric_transfer_bytes{direction}. */
export interface ModelMemoryObserver {
  prefetched(outcome: ModelCallPrefetchOutcome): void;
  transferred(direction: TransferDirection, bytes: number): void;
}

export interface ModelMemoryActivityOptions {
  /** This worker's own queue (`${taskQueue}@${workerId}`): where the run's next model call is sent after a prefetch. */
  worker: string;
  observer?: ModelMemoryObserver;
}

export function modelMemoryActivities(modelCalls: ModelCallMemory, { worker, observer }: ModelMemoryActivityOptions) {
  return {
    kvfabricReleaseModelMemory: (): Promise<boolean> => withFailureCodes(() => modelCalls.release(currentModelCallOwner())),
    [MODEL_MEMORY_WAKE_ACTIVITY]: (request: { neededAt: number }): Promise<ModelCallPrefetch & { worker: string }> =>
      withFailureCodes(async () => {
        const owner = currentModelCallOwner();
        const neededAt = (request as Partial<typeof request> | undefined)?.neededAt;
        if (typeof neededAt !== 'number' || !Number.isFinite(neededAt)) {
          throw new FabricError('INVALID_ARGUMENT', 'a model memory wake-up needs neededAt, ms since the epoch');
        }
        const prefetched = await modelCalls.prefetch(owner, { neededAt });
        observer?.prefetched(prefetched.outcome);
        if (prefetched.bytes > 0) observer?.transferred(prefetched.outcome === 'resumed' ? 'to-device' : 'to-host', prefetched.bytes);
        return { ...prefetched, worker };
      }),
  };
}
