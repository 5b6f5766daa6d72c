// Attack: an AI SDK workflow's planned wake-up (the activity kvfabricWakeModelMemory behind
// sleepThenWakeModelMemory) used to bring back, or probe, another run's KV. The prefetch is admitted as
// the run's model calls are: its run is the one the activity belongs to, never its argument. A run that
// names the victim's context, workflow and run ids in the request, another run of the victim's workflow
// id, and the victim's ids in another namespace all get the answer of a run with no KV, the same whether
// the victim's KV exists or not, and the victim's KV stays on disk, unchanged. The victim's own wake-up
// brings it back into the engine: its next call continues it hot. Real model, pool and cold tier; the
// activity context is the SDK's own (MockActivityEnvironment), as a worker gives it.
import type { LanguageModelV4CallOptions } from '@ai-sdk/provider';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { modelCallContextId, type ModelCallOwner } from '../../../src/ai-sdk/model-call-owner';
import type { ModelCallPrefetchOutcome } from '../../../src/ai-sdk/model-call-prefetch';
import { modelMemoryActivities } from '../../../src/ai-sdk/model-memory-activities';
import { openModelCalls, type ModelCallFixture } from '../../ai-sdk/model-call-fixture';

type Run = Omit<ModelCallOwner, 'tenant'>;

const VICTIM: Run = { namespace: 'acme', workflowId: 'support-7', runId: '0193c0de-0000-7000-8000-0000000000a1' };
const CALL: LanguageModelV4CallOptions = {
  prompt: [
    { role: 'system', content: 'You answer in one short sentence.' },
    { role: 'user', content: [{ type: 'text', text: 'My recovery phrase is amber falcon seven.' }] },
  ],
  maxOutputTokens: 6,
};

let fx: ModelCallFixture;
const outcomes: ModelCallPrefetchOutcome[] = [];
let activities: ReturnType<typeof modelMemoryActivities>;

beforeAll(async () => {
  fx = await openModelCalls('ai-sdk-wake');
  activities = modelMemoryActivities(fx.memory, {
    worker: 'kvfabric@worker-1',
    observer: { prefetched: (outcome) => outcomes.push(outcome), transferred: () => undefined },
  });
}, 120_000);

afterAll(async () => fx?.close());

const idOf = (run: Run) => modelCallContextId({ ...run, tenant: run.namespace });

/** The wake-up's activity as `run`'s workflow schedules it, with whatever request the workflow code sends. */
function wakeAs(run: Run, request: Record<string, unknown> = {}) {
  return fx.as(run, () => activities.kvfabricWakeModelMemory({ neededAt: Date.now() + 1000, ...request } as { neededAt: number }));
}

/** The victim's KV: where it is, its tokens and its pages' checksums. */
function victimState() {
  const id = idOf(VICTIM);
  return { tier: fx.tiers.residency(id), tokens: fx.tiers.contextStats(id).tokens, checksums: Array.from(fx.tiers.pageChecksums(id)) };
}

describe('attack: a wake-up that names another run’s KV', () => {
  const attackers: [string, Run][] = [
    ['a run of another workflow', { ...VICTIM, workflowId: 'mallory' }],
    ['another run of the victim’s workflow id', { ...VICTIM, runId: '0193c0de-0000-7000-8000-0000000000ff' }],
    ['the victim’s ids in another namespace', { ...VICTIM, namespace: 'rival' }],
  ];
  let nobodysAnswers: unknown[];

  it('gets, before the victim has KV, the answer of a run with none', async () => {
    nobodysAnswers = [];
    for (const [, attacker] of attackers) nobodysAnswers.push(await wakeAs(attacker, { contextId: idOf(VICTIM) }));
    expect(nobodysAnswers).toEqual(
      attackers.map(() => ({ outcome: 'none', bytes: 0, ms: 0, contextBytes: 0, worker: 'kvfabric@worker-1' })),
    );
  });

  it('leaves the victim’s KV on disk, unchanged, and answers as if it did not exist', async () => {
    await fx.as(VICTIM, () => fx.model.doGenerate(CALL));
    await fx.memory.settled();
    await fx.engine.release(idOf(VICTIM));
    await fx.tiers.demote(idOf(VICTIM), 'disk');
    const before = victimState();
    expect(before.tier).toBe('disk');
    outcomes.length = 0;

    const answers = [];
    for (const [, attacker] of attackers) {
      answers.push(
        await wakeAs(attacker, {
          contextId: idOf(VICTIM),
          workflowId: VICTIM.workflowId,
          runId: VICTIM.runId,
          namespace: VICTIM.namespace,
        }),
      );
    }
    expect(answers).toEqual(nobodysAnswers);
    expect(outcomes).toEqual(['none', 'none', 'none']);
    expect(victimState()).toEqual(before);
  });

  it('is refused outside an activity, and with no instant', async () => {
    await expect(activities.kvfabricWakeModelMemory({ neededAt: Date.now() })).rejects.toMatchObject({ type: 'INVALID_STATE' });
    const refused = await wakeAs(VICTIM, { neededAt: 'tomorrow' }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ApplicationFailure);
    expect(refused).toMatchObject({ type: 'INVALID_ARGUMENT', nonRetryable: true });
    expect(victimState().tier).toBe('disk');
  });

  it('brings the victim’s own KV back into the engine, where its next call continues it hot', async () => {
    outcomes.length = 0;
    const woke = await wakeAs(VICTIM);
    expect(woke).toMatchObject({ outcome: 'resumed', worker: 'kvfabric@worker-1' });
    expect(woke.bytes).toBeGreaterThan(0);
    expect(woke.contextBytes).toBe(fx.tiers.contextStats(idOf(VICTIM)).bytes);
    expect(outcomes).toEqual(['resumed']);
    expect(fx.tiers.residency(idOf(VICTIM))).toBe('device');
    const next = await fx.as(VICTIM, () => fx.model.doGenerate(CALL));
    expect(next.providerMetadata?.kvfabric?.resumedFrom).toBe('hot');
  });

  it('waits for the run’s call it comes during, and that call’s KV is what the next call continues', async () => {
    const during = fx.as(VICTIM, () => fx.model.doGenerate(CALL));
    const woke = await wakeAs(VICTIM);
    const answered = await during;
    expect(woke.outcome).toBe('resident');
    expect(woke.contextBytes).toBe(fx.tiers.contextStats(idOf(VICTIM)).bytes);
    const next = await fx.as(VICTIM, () => fx.model.doGenerate(CALL));
    expect(next.providerMetadata?.kvfabric?.resumedFrom).toBe('hot');
    // The same prompt again: all of it continued but the one token every call evaluates.
    expect(next.usage.inputTokens.cacheRead).toBe(answered.usage.inputTokens.total! - 1);
  });
});
