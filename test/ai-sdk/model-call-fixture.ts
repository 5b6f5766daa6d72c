// kvfabric's AI SDK language model over a real pool, cold tier and the default model, with no Temporal
// server: each call runs in the SDK's own activity context (MockActivityEnvironment), as a worker gives
// @temporalio/ai-sdk's invokeModel, for the workflow run it names. What the attacks and the streaming
// test share; close() removes its directory.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { MockActivityEnvironment } from '@temporalio/testing';

import { CarriedReplyIds } from '../../src/ai-sdk/carried-reply-ids';
import { KvFabricLanguageModel } from '../../src/ai-sdk/kvfabric-language-model';
import { ModelCallMemory } from '../../src/ai-sdk/model-call-memory';
import type { ModelCallOwner } from '../../src/ai-sdk/model-call-owner';
import { LlamaEngine } from '../../src/engines/llama/llama-engine';
import { MODELS } from '../../src/engines/models';
import { NativeAllocator } from '../../src/fabric';
import { TenantSalts } from '../../src/prefix-sharing/prefix-keys';
import { PrefixSharing } from '../../src/prefix-sharing/prefix-sharing';
import { TenantRegistry } from '../../src/shared-directory/tenant-registry';
import { ColdStore } from '../../src/tiers/cold';
import { posixStore, TEST_KEY_RING, testRecordSeal } from '../shared-directory/fixtures/test-records';
import { TieredMemory } from '../../src/tiers/tiered-memory';

export interface ModelCallFixture {
  engine: LlamaEngine;
  pool: NativeAllocator;
  tiers: TieredMemory;
  tenantIds: TenantRegistry;
  memory: ModelCallMemory;
  model: KvFabricLanguageModel;
  /** Runs `call` as an activity of `owner`'s workflow run (namespace, workflow id, run id). */
  as<T>(owner: Omit<ModelCallOwner, 'tenant'>, call: () => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export interface ModelCallFixtureOptions {
  /** Engine settings past the fixture's (a 512-token context, 2 hot contexts). */
  engine?: Partial<Parameters<typeof LlamaEngine.open>[0]>;
  /**
   * Share prefixes within a tenant (a namespace), as a worker does, through its cold tier too; freed with
   * their last reference (no idle time).
   */
  sharing?: boolean;
}

export async function openModelCalls(name: string, options: ModelCallFixtureOptions = {}): Promise<ModelCallFixture> {
  const dir = mkdtempSync(join(tmpdir(), `kvfabric-${name}-`));
  const engine = await LlamaEngine.open({ contextLength: 512, hotContexts: 2, ...options.engine, stateDir: dir });
  const pool = new NativeAllocator({ shape: MODELS['smollm2-135m']!.shape, blockCount: 256, hostBlockCount: 64 });
  const cold = await ColdStore.open({ directory: join(dir, 'cold'), keyRing: TEST_KEY_RING });
  const tiers = new TieredMemory({ pool, cold });
  const { tokensPerBlock } = MODELS['smollm2-135m']!;
  const prefixes = options.sharing
    ? new PrefixSharing({ salts: new TenantSalts(TEST_KEY_RING), tokensPerBlock, tiers, engine, cold, idleMs: 0 })
    : undefined;
  const tenantIds = await TenantRegistry.open(await posixStore(dir), 'tenants/', testRecordSeal());
  const carriedReplies = new CarriedReplyIds(TEST_KEY_RING);
  const memory = new ModelCallMemory({ tiers, cold, engine, tenantIds, carriedReplies, ...(prefixes ? { prefixes } : {}) });
  return {
    engine,
    pool,
    tiers,
    tenantIds,
    memory,
    model: new KvFabricLanguageModel('kvfabric', () => memory),
    as(owner, call) {
      const environment = new MockActivityEnvironment({
        namespace: owner.namespace,
        workflowNamespace: owner.namespace,
        workflowExecution: { workflowId: owner.workflowId, runId: owner.runId },
      });
      return environment.run(call);
    },
    async close() {
      await memory.settled();
      await prefixes?.close();
      await cold.close();
      await engine.close();
      pool.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
