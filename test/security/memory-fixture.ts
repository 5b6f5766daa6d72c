// An AgentMemory over a real native pool, cold tier and capability check (public keys only), plus an
// issuer holding the matching private key: what a worker and the control plane hold, in one process.
import { join } from 'node:path';

import { AgentMemory, type MemoryObserver } from '../../src/agent-memory/agent-memory';
import { CapabilityCheck, type Presented } from '../../src/agent-memory/capability-check';
import type { DigestState } from '../../src/agent-memory/context-digest';
import type { Allocated, TurnResult } from '../../src/agent-memory/operation-results';
import type { Operation } from '../../src/operations/operations';
import { GrantStore } from '../../src/shared-directory/grant-store';
import { TenantRegistry } from '../../src/shared-directory/tenant-registry';
import { NativeAllocator } from '../../src/fabric/native-allocator';
import { AuditLog } from '../../src/security/audit-log';
import { CapabilityIssuer, type MintRequest } from '../../src/security/capability-issuer';
import { CapabilityVerifier } from '../../src/security/capability-verifier';
import { EpochStore } from '../../src/shared-directory/epochs';
import type { RawKey } from '../../src/security/key-list';
import { ColdStore } from '../../src/tiers/cold';
import { TieredMemory, type TenantQuotaShares } from '../../src/tiers/tiered-memory';
import type { TenantSalts } from '../../src/prefix-sharing/prefix-keys';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import type { BlobStore } from '../../src/blob-store/blob-store';
import type { Engine } from '../../src/engines/engine';
import { MODELS } from '../../src/engines/models';
import { SyntheticEngine } from '../../src/engines/synthetic/synthetic-engine';
import { posixStore, TEST_KEY_RING, testRecordSeal } from '../shared-directory/fixtures/test-records';
import { TEST_SIGNING_KEYS, TEST_TRUSTED_KEYS } from './test-keys';

export interface MemoryFixture {
  memory: AgentMemory;
  issuer: CapabilityIssuer;
  auditFile: string;
  capabilities: CapabilityCheck;
  /** The tier layer under `memory` (AgentMemory keeps its own private): what a test inspects or arranges directly. */
  tiers: TieredMemory;
  /** Every tier-layer method AgentMemory called, in order: a denied call must add none. */
  tierCalls: string[];
  /** A token for `agentId` (its own context and workflow, every right) with any claim overridden. */
  token(agentId: string, tenant?: string, overrides?: Partial<MintRequest>): string;
  /** A call as an activity of the agent's own workflow presents it. */
  call(agentId: string, tenant: string, action: Operation, token: unknown): Presented;
  /** Allocates the agent's context with `token`, as its workflow's start does (the tiny model's pages). */
  allocate(agentId: string, token: unknown, options?: { tenant?: string; checkpoint?: boolean }): Promise<Allocated>;
  /** A synthetic turn of `tokens` tokens (a fixture without an engine), as the agent's workflow asks for it with `token`. */
  turn(agentId: string, token: unknown, turn: number, tokens: number, before: DigestState, tenant?: string): Promise<TurnResult>;
  close(): Promise<void>;
}

export async function openMemory(
  dir: string,
  options: {
    blockCount?: number;
    /** Host memory's blocks (default 64). */
    hostBlockCount?: number;
    observer?: MemoryObserver;
    trusted?: RawKey[];
    clock?: () => number;
    engine?: Engine;
    /** Tenant quotas as a worker has them ({}: the worker's defaults); absent, none. */
    quotas?: Partial<TenantQuotaShares>;
    /** The worker's tenant salts: its agents then share prompt prefixes within a tenant. */
    prefixSalts?: TenantSalts;
    /** How long a shared prefix nothing refers to stays (default: the worker's). */
    prefixIdleMs?: number;
    /** Shared prefixes through the cold tier (AgentMemory's option, default true). */
    prefixesInColdTier?: boolean;
    /** Background work that failed (a cold prefix refused, say). */
    onBackgroundError?: (what: string, err: unknown) => void;
    /** Where grants, epochs and tenant ids are kept (a bucket); absent, the POSIX store rooted at `dir`. */
    records?: BlobStore;
  } = {},
): Promise<MemoryFixture> {
  // A model engine's own shape (its turns are messages), else the tiny synthetic one (token-count turns).
  const model = options.engine ? MODELS['smollm2-135m']! : MODELS.tiny!;
  const pool = new NativeAllocator({
    shape: model.shape,
    blockCount: options.blockCount ?? 64,
    hostBlockCount: options.hostBlockCount ?? 64,
  });
  const cold = await ColdStore.open({ directory: join(dir, 'cold'), keyRing: TEST_KEY_RING });
  const auditFile = join(dir, 'audit', 'denials.jsonl');
  const audit = new AuditLog(auditFile, 'test-worker');
  // The worker's records are sealed with its cold tier's ring, and a forged one audited (src/plugin/worker-memory.ts).
  const records = testRecordSeal(audit);
  const shared = options.records ?? (await posixStore(dir));
  const grants = await GrantStore.open(shared, 'grants/', records);
  const capabilities = new CapabilityCheck(
    new CapabilityVerifier(options.trusted ?? TEST_TRUSTED_KEYS, options.clock ? { clock: options.clock } : {}),
    await EpochStore.open(shared, 'epochs/', records),
    audit,
    (action) => options.observer?.denied(action),
  );
  const tierCalls: string[] = [];
  const tiers = new TieredMemory({ pool, cold, ...(options.quotas ? { quotas: options.quotas } : {}) });
  const memory = new AgentMemory({
    tiers: recorded(tiers, tierCalls),
    layout: pool.layout,
    grants,
    capabilities,
    cold,
    tenantIds: await TenantRegistry.open(shared, 'tenants/', records),
    ...(options.observer ? { observer: options.observer } : {}),
    engine: options.engine ?? new SyntheticEngine({ model, contextLength: 131_072 }),
    ...(options.prefixSalts ? { prefixSalts: options.prefixSalts } : {}),
    ...(options.prefixIdleMs === undefined ? {} : { prefixIdleMs: options.prefixIdleMs }),
    ...(options.prefixesInColdTier === undefined ? {} : { prefixesInColdTier: options.prefixesInColdTier }),
    ...(options.onBackgroundError ? { onBackgroundError: options.onBackgroundError } : {}),
  });
  const issuer = new CapabilityIssuer(TEST_SIGNING_KEYS);
  const call = (agentId: string, tenant: string, action: Operation, token: unknown): Presented => ({
    contextId: agentId,
    agentId,
    tenant,
    workflowId: agentWorkflowId(agentId),
    action,
    token,
  });
  return {
    memory,
    issuer,
    auditFile,
    capabilities,
    tiers,
    tierCalls,
    token: (agentId, tenant = 'acme', overrides = {}) =>
      issuer.mint({ tenant, agentId, workflowId: agentWorkflowId(agentId), ...overrides }),
    call,
    allocate: (agentId, token, { tenant = 'acme', checkpoint = false } = {}) =>
      memory.allocate(call(agentId, tenant, 'allocate', token), {
        shape: model.shape,
        tokensPerBlock: model.tokensPerBlock,
        checkpoint,
      }),
    turn: (agentId, token, turn, tokens, before, tenant = 'acme') =>
      memory.turn(call(agentId, tenant, 'turn', token), { turn, tokens, before, checkpoint: false }),
    close: async () => {
      await memory.settled();
      await memory.prefixSharing?.close();
      await cold.close();
      pool.close();
    },
  };
}

/** The real tier layer, with each method call noted by name (a recording wrapper, not a stand-in). */
function recorded<T extends object>(target: T, calls: string[]): T {
  return new Proxy(target, {
    get(object, property) {
      const value: unknown = Reflect.get(object, property, object);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        calls.push(String(property));
        return (value as (...a: unknown[]) => unknown).apply(object, args);
      };
    },
  });
}
