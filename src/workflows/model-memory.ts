// For workflow code whose AI SDK model calls run on kvfabric's provider (docs/ai-sdk.md): free the run's
// KV now, instead of when the run ends (the workers' housekeeping frees it then), and plan when it is
// needed again, so that the call after a pause finds it back in the engine (docs/ai-sdk.md#planned-wake-ups).
// Import it from 'kvfabric/workflows/model-memory'; a kvfabric worker with a model serves the activities
// (src/ai-sdk/model-memory-activities.ts), on the queue the run's model calls go to.
//
// The wake-up mirrors an agent's (planWake, sleepThenWake in 'kvfabric/workflows/child'), but the run owns
// its KV itself: no other workflow keeps the plan, so the timer is this run's own, and the prefetch is
// admitted as the run's model calls are, by the run the server says the activity belongs to.
import { type Duration, msToNumber } from '@temporalio/common/lib/time';
import { CancellationScope, isCancellation, log, proxyActivities, sleep } from '@temporalio/workflow';

import type { PrefetchOutcome } from '../agent-memory/agent-memory';
import { WAKE_LEAD_FLOOR_MS, WAKE_LEAD_MARGIN } from './lead-time';

/** What a wake-up's prefetch found and did (src/ai-sdk/model-call-prefetch.ts), and where. */
export interface ModelMemoryWake {
  /** As an agent's prefetch is counted, or `none`: the run holds no KV (no call yet, or freed). */
  outcome: PrefetchOutcome | 'none';
  /** Bytes brought up a tier, and the time to adopt, move and load them, in ms. */
  bytes: number;
  ms: number;
  /** The run's whole KV, in bytes. */
  contextBytes: number;
  /**
   * The prefetching worker's own queue: the plugin's interceptor sends the run's next kvfabric model call
   * there (src/ai-sdk/model-call-route.ts).
   */
  worker: string;
}

export interface ModelMemoryActivities {
  /** Frees the calling run's KV; false when there was none. */
  kvfabricReleaseModelMemory(): Promise<boolean>;
  /** Brings the calling run's KV up as far as free room takes it, idle again from `neededAt` (ms since the epoch). */
  kvfabricWakeModelMemory(request: { neededAt: number }): Promise<ModelMemoryWake>;
}

/** Where the run's model calls go, when the workflow gave @temporalio/ai-sdk's provider a queue of its own. */
export interface ModelMemoryWakeOptions {
  /** The queue of the run's model calls (`languageModel: { taskQueue }`); the workflow's own by default. */
  taskQueue?: string;
}

/**
 * Before the run's first prefetch that moved bytes: the time to bring 1 GB back at 100 MB/s (the agents'
 * unmeasured speed, lead-time.ts), about an 8k-token context of Llama-3-8B shape. The workflow cannot know
 * its KV's size before a prefetch reports it.
 */
export const MODEL_MEMORY_UNMEASURED_LEAD_MS = 10_000;

/** The run's last prefetch that moved bytes: its KV's size then, and how fast it came back. */
let lastRestore: { contextBytes: number; bytesPerMs: number } | undefined;
/** The plan now in force: cancelling it cancels its timer, or its prefetch. */
let planned: CancellationScope | undefined;

export function releaseModelMemory(): Promise<boolean> {
  const { kvfabricReleaseModelMemory } = proxyActivities<ModelMemoryActivities>({ startToCloseTimeout: '1 minute' });
  return kvfabricReleaseModelMemory();
}

/**
 * How long before a wake-up the prefetch starts: the KV's size over the speed of the run's last prefetch
 * that moved bytes, twice that, and at least the agents' floor; MODEL_MEMORY_UNMEASURED_LEAD_MS before one.
 * From workflow state only: the same on every replay.
 */
export function modelMemoryLeadMs(): number {
  if (!lastRestore) return MODEL_MEMORY_UNMEASURED_LEAD_MS;
  return Math.max(WAKE_LEAD_FLOOR_MS, Math.ceil((WAKE_LEAD_MARGIN * lastRestore.contextBytes) / lastRestore.bytesPerMs));
}

/**
 * Plans the run's KV to be back in the engine at `at` (workflow time, ms), replacing any earlier plan;
 * null cancels it. The prefetch runs at `at` minus the lead time, on the queue of the run's model calls,
 * and the run's next kvfabric model call then goes to the worker that prefetched (the plugin's workflow
 * interceptor, src/ai-sdk/model-call-timeouts.ts, sees the answer). Resolves once the plan is over, with
 * what the prefetch found; undefined when it failed (logged only: the call brings the KV back itself), or
 * the plan was cancelled or replaced first.
 * @experimental Follows @temporalio/ai-sdk, itself experimental.
 */
export function planModelMemoryWake(at: number | null, options: ModelMemoryWakeOptions = {}): Promise<ModelMemoryWake | undefined> {
  planned?.cancel();
  planned = undefined;
  if (at === null) return Promise.resolve(undefined);
  const scope = new CancellationScope();
  planned = scope;
  return scope
    .run(() => wakeAt(at, options))
    .catch((err: unknown) => {
      if (isCancellation(err)) return undefined;
      throw err;
    });
}

/**
 * Sleeps `duration`; the run's KV is brought back so that its next model call finds it in the engine when
 * the sleep ends. A prefetch still running then is waited for (the call would wait for it on its worker).
 * Resolves with what the prefetch found, as planModelMemoryWake.
 * @experimental Follows @temporalio/ai-sdk, itself experimental.
 */
export async function sleepThenWakeModelMemory(
  duration: Duration,
  options: ModelMemoryWakeOptions = {},
): Promise<ModelMemoryWake | undefined> {
  const [woke] = await Promise.all([planModelMemoryWake(Date.now() + msToNumber(duration), options), sleep(duration)]);
  return woke;
}

/** The plan's timer, then its prefetch, whose answer teaches the lead time (and routes the next model call). */
async function wakeAt(at: number, { taskQueue }: ModelMemoryWakeOptions): Promise<ModelMemoryWake | undefined> {
  const startIn = at - modelMemoryLeadMs() - Date.now();
  if (startIn > 0) await sleep(startIn);
  const { kvfabricWakeModelMemory } = proxyActivities<ModelMemoryActivities>({
    ...(taskQueue === undefined ? {} : { taskQueue }),
    startToCloseTimeout: '1 minute',
    retry: { maximumAttempts: 1 }, // best effort: a retry would come after the call it was for
  });
  let woke: ModelMemoryWake;
  try {
    woke = await kvfabricWakeModelMemory({ neededAt: at });
  } catch (err) {
    if (isCancellation(err)) throw err;
    log.warn('kvfabric model memory prefetch failed: the next model call brings the KV back itself', { error: String(err) });
    return undefined;
  }
  if (woke.bytes > 0) lastRestore = { contextBytes: woke.contextBytes, bytesPerMs: woke.bytes / Math.max(woke.ms, 1) };
  return woke;
}
