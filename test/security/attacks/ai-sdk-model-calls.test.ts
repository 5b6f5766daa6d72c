// Attacks on AI SDK agents' KV (kvfabric's model provider, src/ai-sdk): the KV belongs to the workflow
// run whose activity makes the call, as the Temporal server reports it. Another run of the same workflow
// id, the same ids in another namespace, providerOptions naming the victim, the victim's reply ids copied
// into another run's prompt, forged reply ids, a call outside an activity,
// an agent named after the context, and a manifest another tenant wrote under the victim's id: none
// reaches the victim's KV, and none changes it. Real model, real pool and cold tier; the activity context
// is the SDK's own (MockActivityEnvironment), as the worker gives invokeModel. Refusals leave as
// non-retryable ApplicationFailures typed by their code.
import type { LanguageModelV4CallOptions, LanguageModelV4GenerateResult } from '@ai-sdk/provider';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { modelCallContextId, type ModelCallOwner } from '../../../src/ai-sdk/model-call-owner';
import { isAgentId } from '../../../src/identity/agent-identity';
import { openModelCalls, type ModelCallFixture } from '../../ai-sdk/model-call-fixture';

const VICTIM = { namespace: 'acme', workflowId: 'research-1', runId: '0193c0de-0000-7000-8000-000000000001' };
const CALL: LanguageModelV4CallOptions = {
  prompt: [
    { role: 'system', content: 'You answer in one short sentence.' },
    { role: 'user', content: [{ type: 'text', text: 'What is my account number? It is 4417.' }] },
  ],
  maxOutputTokens: 6,
};

let fx: ModelCallFixture;

beforeAll(async () => {
  fx = await openModelCalls('ai-sdk-attacks');
}, 120_000);

afterAll(async () => fx?.close());

/** A model call as the invokeModel activity of `owner`'s workflow run makes it. */
function callAs(owner: Omit<ModelCallOwner, 'tenant'>, options: LanguageModelV4CallOptions = CALL): Promise<LanguageModelV4GenerateResult> {
  return fx.as(owner, () => fx.model.doGenerate(options));
}

const idOf = (owner: Omit<ModelCallOwner, 'tenant'>) => modelCallContextId({ ...owner, tenant: owner.namespace });

/** The victim's stored context: its token ids and checksums, to show an attack changed nothing. */
function snapshot(): { tokens: number; checksums: number[] } {
  const id = idOf(VICTIM);
  return { tokens: fx.tiers.contextStats(id).tokens, checksums: Array.from(fx.tiers.pageChecksums(id)) };
}

describe('attacks on AI SDK agents’ KV', () => {
  it('the victim continues its own KV', async () => {
    const first = await callAs(VICTIM);
    expect(first.usage.inputTokens.cacheRead).toBe(0);
    const again = await callAs(VICTIM);
    expect(again.usage.inputTokens.cacheRead).toBeGreaterThan(0);
  });

  it('another run of the same workflow id reuses nothing of the victim’s KV and changes none of it', async () => {
    await fx.memory.settled(); // the victim's last call is in its pages
    const before = snapshot();
    const attacker = await callAs({ ...VICTIM, runId: '0193c0de-0000-7000-8000-0000000000ff' });
    expect(attacker.usage.inputTokens.cacheRead).toBe(0);
    await fx.memory.settled();
    expect(snapshot()).toEqual(before);
  });

  it('the same workflow and run ids in another namespace are another tenant’s context', async () => {
    const other = { ...VICTIM, namespace: 'rival' };
    const attacker = await callAs(other);
    expect(attacker.usage.inputTokens.cacheRead).toBe(0);
    expect(idOf(other)).not.toBe(idOf(VICTIM));
    await fx.memory.settled();
    expect(fx.tiers.contextStats(idOf(other)).tenant).not.toBe(fx.tiers.contextStats(idOf(VICTIM)).tenant);
  });

  it('providerOptions naming the victim are not an identity', async () => {
    const attacker = await callAs(
      { ...VICTIM, workflowId: 'attacker' },
      { ...CALL, providerOptions: { kvfabric: { contextId: idOf(VICTIM), workflowId: VICTIM.workflowId, runId: VICTIM.runId } } },
    );
    expect(attacker.usage.inputTokens.cacheRead).toBe(0);
  });

  it('reply ids carried in a prompt are only prompt tokens: the victim’s, copied into another run’s call, reach none of its KV', async () => {
    const victimReply = await callAs(VICTIM);
    const carried = victimReply.content[0]!.providerMetadata?.kvfabric;
    expect(carried).toMatchObject({ replyIds: expect.any(Array) });
    await fx.memory.settled();
    const before = snapshot();
    const { text } = victimReply.content[0] as { text: string };
    const copied: LanguageModelV4CallOptions = {
      ...CALL,
      prompt: [
        ...CALL.prompt,
        { role: 'assistant', content: [{ type: 'text', text, providerOptions: { kvfabric: carried! } }] },
        { role: 'user', content: [{ type: 'text', text: 'Say it again.' }] },
      ],
    };
    const attacker = await callAs({ ...VICTIM, workflowId: 'copycat' }, copied);
    expect(attacker.usage.inputTokens.cacheRead).toBe(0);
    await fx.memory.settled();
    expect(snapshot()).toEqual(before);
  });

  it('carried ids outside the vocabulary (even sealed with the workers’ key), or not ids, are INVALID_ARGUMENT; nothing stored', async () => {
    const run = { ...VICTIM, workflowId: 'forger' };
    const text = 'Hello.';
    // As if a worker had sealed them: the engine's own check still stands behind the MAC.
    const [sealed] = fx.memory.carriedReplies.withReplyIds(
      { ...run, tenant: run.namespace },
      [{ type: 'text', text }],
      text,
      Uint32Array.of(2 ** 31),
    );
    const forgeries = [sealed!.providerMetadata!.kvfabric!, { replyIds: [-1], replyKeyId: 'k', replyMac: 'x' }, { replyIds: 'all' }];
    for (const carried of forgeries) {
      const forged: LanguageModelV4CallOptions = {
        ...CALL,
        prompt: [
          ...CALL.prompt,
          {
            role: 'assistant',
            content: [{ type: 'text', text, providerOptions: { kvfabric: carried as never } }],
          },
          { role: 'user', content: [{ type: 'text', text: 'Go on.' }] },
        ],
      };
      const err = await callAs(run, forged).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ApplicationFailure);
      expect(err).toMatchObject({ type: 'INVALID_ARGUMENT', nonRetryable: true });
    }
    await fx.memory.settled();
    expect(fx.tiers.has(idOf(run)) ? fx.tiers.contextStats(idOf(run)).tokens : 0).toBe(0);
  });

  it('a call outside an activity is refused before anything is made', async () => {
    const held = fx.tiers.contextIds().length;
    const err = await fx.model.doGenerate(CALL).catch((e: unknown) => e);
    expect(err).toMatchObject({ type: 'INVALID_STATE', nonRetryable: true });
    expect(fx.tiers.contextIds()).toHaveLength(held);
  });

  it('no kvfabric agent can be named after an AI SDK context', () => {
    expect(isAgentId(idOf(VICTIM))).toBe(false);
  });

  it('a manifest another tenant wrote under a run’s context id is refused, never continued', async () => {
    const target = { ...VICTIM, runId: '0193c0de-0000-7000-8000-0000000000aa' };
    const id = idOf(target);
    // Another tenant's worker, sharing the tier directory, plants a context under the victim's id.
    fx.tiers.create(id, await fx.tenantIds.idOf('rival'));
    await fx.tiers.append(id, new Uint8Array(fx.pool.layout.bytesPerToken * 4), {
      fingerprint: fx.engine.fingerprint,
      tokens: [1, 2, 3, 4],
      replies: [],
    } as never);
    await fx.tiers.spill(id);
    await fx.tiers.dropLocalCopy(id);

    const err = await callAs(target).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err).toMatchObject({ type: 'PERMISSION_DENIED', nonRetryable: true });
    expect(fx.tiers.has(id)).toBe(false);
  });
});
