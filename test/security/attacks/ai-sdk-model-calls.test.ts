// Attacks on AI SDK agents' KV (kvfabric's model provider, src/ai-sdk): the KV belongs to the workflow
// run whose activity makes the call, as the Temporal server reports it. Another run of the same workflow
// id, the same ids in another namespace, providerOptions naming the victim, a call outside an activity,
// an agent named after the context, and a manifest another tenant wrote under the victim's id: none
// reaches the victim's KV, and none changes it. Real model, real pool and cold tier; the activity context
// is the SDK's own (MockActivityEnvironment), as the worker gives invokeModel. Refusals leave as
// non-retryable ApplicationFailures typed by their code.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { LanguageModelV4CallOptions, LanguageModelV4GenerateResult } from '@ai-sdk/provider';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { KvFabricLanguageModel } from '../../../src/ai-sdk/kvfabric-language-model';
import { ModelCallMemory } from '../../../src/ai-sdk/model-call-memory';
import { modelCallContextId, type ModelCallOwner } from '../../../src/ai-sdk/model-call-owner';
import { LlamaEngine } from '../../../src/engines/llama/llama-engine';
import { MODELS } from '../../../src/engines/models';
import { NativeAllocator } from '../../../src/fabric';
import { isAgentId } from '../../../src/identity/agent-identity';
import { TenantRegistry } from '../../../src/shared-directory/tenant-registry';
import { ColdStore, KeyRing } from '../../../src/tiers/cold';
import { TieredMemory } from '../../../src/tiers/tiered-memory';

const VICTIM = { namespace: 'acme', workflowId: 'research-1', runId: '0193c0de-0000-7000-8000-000000000001' };
const CALL: LanguageModelV4CallOptions = {
  prompt: [
    { role: 'system', content: 'You answer in one short sentence.' },
    { role: 'user', content: [{ type: 'text', text: 'What is my account number? It is 4417.' }] },
  ],
  maxOutputTokens: 6,
};

let dir: string;
let engine: LlamaEngine;
let pool: NativeAllocator;
let cold: ColdStore;
let tiers: TieredMemory;
let tenantIds: TenantRegistry;
let memory: ModelCallMemory;
let model: KvFabricLanguageModel;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-ai-sdk-attacks-'));
  engine = await LlamaEngine.open({ contextLength: 512, hotContexts: 2, stateDir: dir });
  pool = new NativeAllocator({ shape: MODELS['smollm2-135m']!.shape, blockCount: 256, hostBlockCount: 64 });
  cold = await ColdStore.open({ directory: join(dir, 'cold'), keyRing: new KeyRing([{ id: 'k', key: Buffer.alloc(32, 7) }], 'k') });
  tiers = new TieredMemory({ pool, cold });
  tenantIds = await TenantRegistry.open(join(dir, 'tenants'));
  memory = new ModelCallMemory({ tiers, cold, engine, tenantIds });
  model = new KvFabricLanguageModel('kvfabric', () => memory);
}, 120_000);

afterAll(async () => {
  await cold?.close();
  await engine?.close();
  pool?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A model call as the invokeModel activity of `owner`'s workflow run makes it. */
function callAs(owner: Omit<ModelCallOwner, 'tenant'>, options: LanguageModelV4CallOptions = CALL): Promise<LanguageModelV4GenerateResult> {
  const environment = new MockActivityEnvironment({
    namespace: owner.namespace,
    workflowNamespace: owner.namespace,
    workflowExecution: { workflowId: owner.workflowId, runId: owner.runId },
  });
  return environment.run(() => model.doGenerate(options));
}

const idOf = (owner: Omit<ModelCallOwner, 'tenant'>) => modelCallContextId({ ...owner, tenant: owner.namespace });

/** The victim's stored context: its token ids and checksums, to show an attack changed nothing. */
function snapshot(): { tokens: number; checksums: number[] } {
  const id = idOf(VICTIM);
  return { tokens: tiers.contextStats(id).tokens, checksums: Array.from(tiers.pageChecksums(id)) };
}

describe('attacks on AI SDK agents’ KV', () => {
  it('the victim continues its own KV', async () => {
    const first = await callAs(VICTIM);
    expect(first.usage.inputTokens.cacheRead).toBe(0);
    const again = await callAs(VICTIM);
    expect(again.usage.inputTokens.cacheRead).toBeGreaterThan(0);
  });

  it('another run of the same workflow id reuses nothing of the victim’s KV and changes none of it', async () => {
    await memory.settled(); // the victim's last call is in its pages
    const before = snapshot();
    const attacker = await callAs({ ...VICTIM, runId: '0193c0de-0000-7000-8000-0000000000ff' });
    expect(attacker.usage.inputTokens.cacheRead).toBe(0);
    await memory.settled();
    expect(snapshot()).toEqual(before);
  });

  it('the same workflow and run ids in another namespace are another tenant’s context', async () => {
    const other = { ...VICTIM, namespace: 'rival' };
    const attacker = await callAs(other);
    expect(attacker.usage.inputTokens.cacheRead).toBe(0);
    expect(idOf(other)).not.toBe(idOf(VICTIM));
    await memory.settled();
    expect(tiers.contextStats(idOf(other)).tenant).not.toBe(tiers.contextStats(idOf(VICTIM)).tenant);
  });

  it('providerOptions naming the victim are not an identity', async () => {
    const attacker = await callAs(
      { ...VICTIM, workflowId: 'attacker' },
      { ...CALL, providerOptions: { kvfabric: { contextId: idOf(VICTIM), workflowId: VICTIM.workflowId, runId: VICTIM.runId } } },
    );
    expect(attacker.usage.inputTokens.cacheRead).toBe(0);
  });

  it('a call outside an activity is refused before anything is made', async () => {
    const held = tiers.contextIds().length;
    const err = await model.doGenerate(CALL).catch((e: unknown) => e);
    expect(err).toMatchObject({ type: 'INVALID_STATE', nonRetryable: true });
    expect(tiers.contextIds()).toHaveLength(held);
  });

  it('no kvfabric agent can be named after an AI SDK context', () => {
    expect(isAgentId(idOf(VICTIM))).toBe(false);
  });

  it('a manifest another tenant wrote under a run’s context id is refused, never continued', async () => {
    const target = { ...VICTIM, runId: '0193c0de-0000-7000-8000-0000000000aa' };
    const id = idOf(target);
    // Another tenant's worker, sharing the tier directory, plants a context under the victim's id.
    tiers.create(id, await tenantIds.idOf('rival'));
    await tiers.append(id, new Uint8Array(pool.layout.bytesPerToken * 4), {
      fingerprint: engine.fingerprint,
      tokens: [1, 2, 3, 4],
      replies: [],
    } as never);
    await tiers.checkpoint(id);
    await tiers.dropLocalCopy(id);

    const err = await callAs(target).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err).toMatchObject({ type: 'PERMISSION_DENIED', nonRetryable: true });
    expect(tiers.has(id)).toBe(false);
  });
});
