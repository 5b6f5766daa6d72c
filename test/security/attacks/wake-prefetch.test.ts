// Attack: a planned wake-up's prefetch (the holder's `wake`, a resume with the agent's custodian token)
// used to load a context that is not the caller's. The workflow only ever presents its own custodian, so
// the worker is where a forged prefetch is stopped: another tenant's or another agent's custodian, the
// victim's custodian from another workflow, and the victim's own caller token (every caller right, but no
// `custody`) are refused PERMISSION_DENIED and audited, and nothing moves; a context that does not exist
// is refused alike, so a refusal tells nothing of which contexts exist. The prefetch that is the owner's
// own makes no room by evicting: with the device full it brings a context on disk up to host memory and
// stops there, or, with host memory full too, leaves it where it was, and says so.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import type { PrefetchOutcome } from '../../../src/agent-memory/agent-memory';
import { emptyDigest, type DigestState } from '../../../src/agent-memory/context-digest';
import { agentWorkflowId } from '../../../src/identity/agent-identity';
import type { TenantQuotaShares } from '../../../src/tiers/tenant-quotas';
import { openMemory, type MemoryFixture } from '../memory-fixture';

let dir: string;
let fx: MemoryFixture;
const outcomes: PrefetchOutcome[] = [];
/** Contexts the tier layer pushed down on its own (foreground or background). */
const evictions: string[] = [];
const observer = {
  transferred: () => undefined,
  denied: () => undefined,
  evicted: (from: string, to: string) => evictions.push(`${from}->${to}`),
  checkpointSkipped: () => undefined,
  quotaRefused: () => undefined,
  prefetched: (outcome: PrefetchOutcome) => outcomes.push(outcome),
};

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-wake-'));
  outcomes.length = 0;
  evictions.length = 0;
  fx = await openMemory(dir, { blockCount: 8, observer });
});
afterEach(async () => {
  await fx?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** An agent with `tokens` tokens, moved to `tier` by its own workflow: its caller token, custodian and digest. */
async function agent(agentId: string, tenant: string, tokens: number, tier: 'device' | 'host' | 'disk') {
  const token = fx.token(agentId, tenant);
  const custodian = fx.issuer.mintCustodian(token);
  await fx.allocate(agentId, custodian, { tenant });
  const { digest } = await fx.turn(agentId, token, 0, tokens, emptyDigest(), tenant);
  if (tier !== 'device') await fx.memory.suspend(fx.call(agentId, tenant, 'suspend', custodian), { tier, expected: digest });
  return { token, custodian, digest };
}

/** The holder's `wake` as the agent's workflow runs it: `contextId`'s context, with `token`, from `workflowId`. */
function prefetch(contextId: string, token: string, expected: DigestState, workflowId = agentWorkflowId(contextId), tenant = 'acme') {
  return fx.memory.resume({ ...fx.call(contextId, tenant, 'wake', token), workflowId }, { expected, roomOnly: true });
}

/** The worker again, with other pool sizes, in a fresh directory. */
async function reopen(sizes: { blockCount: number; hostBlockCount?: number; quotas?: Partial<TenantQuotaShares> }): Promise<void> {
  await fx.close();
  rmSync(dir, { recursive: true, force: true });
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-wake-'));
  fx = await openMemory(dir, { ...sizes, observer });
}

function auditedReasons(): string[] {
  return readFileSync(fx.auditFile, 'utf8')
    .trim()
    .split('\n')
    .map((line) => (JSON.parse(line) as { action: string; reason: string }).reason);
}

describe('attack: a prefetch of a context that is not its own', () => {
  it("is refused and audited for another tenant's or agent's custodian, the victim's caller token or custodian elsewhere", async () => {
    const victim = await agent('victim', 'acme', 40, 'disk');
    const mallory = await agent('mallory', 'evil', 8, 'device');
    const sibling = await agent('sibling', 'acme', 8, 'device');
    const calls = fx.tierCalls.length;

    // One at a time, so the audit log's order is the attempts' order.
    const refused = [
      () => prefetch('victim', mallory.custodian, victim.digest),
      () => prefetch('victim', sibling.custodian, victim.digest),
      () => prefetch('victim', victim.token, victim.digest),
      () => prefetch('victim', victim.custodian, victim.digest, agentWorkflowId('mallory')),
      () => prefetch('ghost', sibling.custodian, victim.digest),
    ];
    for (const attempt of refused) await expect(attempt()).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(auditedReasons()).toEqual(['wrong-tenant', 'wrong-context', 'missing-right', 'wrong-workflow', 'wrong-context']);
    expect(fx.tierCalls.slice(calls).filter((name) => name === 'restore')).toEqual([]);
    expect(fx.memory.snapshot('victim').tier).toBe('disk');
    expect(outcomes).toEqual([]);

    // The owner's own prefetch, with the custodian its workflow carries: back on the device, checked.
    const resumed = await prefetch('victim', victim.custodian, victim.digest);
    expect(resumed).toMatchObject({ tier: 'device', from: 'disk', digest: victim.digest });
    expect(outcomes).toEqual(['resumed']);
  });
});

describe("a prefetch's room", () => {
  it('evicts nothing: with the device full of a context in use, a context on disk comes up to host memory and stops there', async () => {
    // 8 device blocks of 16 tokens: the busy agent holds 6 of them, the others need 3 each.
    const cold = await agent('cold', 'acme', 40, 'disk');
    const warm = await agent('warm', 'acme', 40, 'host');
    await agent('busy', 'acme', 96, 'device');
    const blockBytes = fx.tiers.stats().blockBytes;

    expect(await prefetch('cold', cold.custodian, cold.digest)).toMatchObject({ tier: 'host', from: 'disk', bytes: 3 * blockBytes });
    expect(await prefetch('warm', warm.custodian, warm.digest)).toMatchObject({ tier: 'host', from: 'host', bytes: 0 });
    expect(outcomes).toEqual(['filled-host', 'stopped-host']);
    expect(evictions).toEqual([]);
    expect(fx.memory.snapshot('busy').tier).toBe('device');
    expect(fx.tiers.contextStats('cold')).toMatchObject({ hostPages: 3, diskOnlyPages: 0 });

    // The call that needs it resumes it from host memory, checked, and makes room as any call does.
    expect(await fx.memory.resume(fx.call('cold', 'acme', 'resume', cold.token), { expected: cold.digest })).toMatchObject({
      tier: 'device',
      from: 'host',
      digest: cold.digest,
    });
    expect(fx.memory.snapshot('busy').tier).not.toBe('device');
  });

  it('leaves a context on disk when host memory has no free room either', async () => {
    await reopen({ blockCount: 8, hostBlockCount: 4 });
    const cold = await agent('cold', 'acme', 40, 'disk');
    await agent('warm', 'acme', 40, 'host'); // 3 of the host's 4 blocks
    await agent('busy', 'acme', 96, 'device');
    const before = fx.tiers.stats();

    expect(await prefetch('cold', cold.custodian, cold.digest)).toMatchObject({ tier: 'disk', from: 'disk', bytes: 0 });
    expect(outcomes).toEqual(['stopped-disk']);
    expect(evictions).toEqual([]);
    expect(fx.tiers.stats()).toMatchObject({ freeBlocks: before.freeBlocks, host: before.host });
  });

  it("keeps within its tenant's quota: the tenant's own context in use is not evicted for it either", async () => {
    // 32 device blocks, a quarter of them the tenant's: 8. The busy agent holds 6, the cold one needs 3.
    await reopen({ blockCount: 32, quotas: { device: 0.25 } });
    const cold = await agent('cold', 'acme', 40, 'disk');
    await agent('busy', 'acme', 96, 'device');

    expect(await prefetch('cold', cold.custodian, cold.digest)).toMatchObject({ tier: 'host', from: 'disk' });
    expect(outcomes).toEqual(['filled-host']);
    expect(evictions).toEqual([]);
    expect(fx.memory.snapshot('busy').tier).toBe('device');
  });

  it("keeps the tier's low watermark: free blocks the prefetch would take below it are no room", async () => {
    // 32 device blocks, low watermark 10 %: 3.2 blocks stay free. The busy agent leaves 5 free.
    await reopen({ blockCount: 32 });
    const cold = await agent('cold', 'acme', 40, 'disk');
    await agent('busy', 'acme', 27 * 16, 'device');
    expect(fx.tiers.stats().freeBlocks).toBe(5);

    expect(await prefetch('cold', cold.custodian, cold.digest)).toMatchObject({ tier: 'host', from: 'disk' });
    expect(outcomes).toEqual(['filled-host']);
    await fx.tiers.idle();
    expect(evictions).toEqual([]);
  });
});
