// Attack of issue 38, item 1: one tenant starves the others. Pinned contexts are never evicted, so a
// tenant with ordinary caller rights (its own agents' tokens) pins until the device pool is full, and every
// other tenant's next and first turn then fail POOL_EXHAUSTED. Per-tenant quotas refuse the pin that
// would take more than the tenant's pinned share (RESOURCE_EXHAUSTED, naming the quota), a tenant at its
// device quota makes room from its own contexts or is refused (never from another tenant's), and eviction
// takes from tenants over their fair share first. A real pool, grants and tokens; the synthetic engine.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import type { MemoryObserver } from '../../../src/agent-memory/agent-memory';
import { emptyDigest, type DigestState } from '../../../src/agent-memory/context-digest';
import { toApplicationFailure } from '../../../src/activities/failures';
import { openMemory, type MemoryFixture } from '../memory-fixture';

/** The fixture's pool: 64 device blocks of 16 tokens (the tiny model). */
const DEVICE_BLOCKS = 64;
const TOKENS_PER_BLOCK = 16;

const cleanups: Array<() => Promise<void>> = [];
/** What the worker's metrics were told of quota refusals (tenant:quota), for the worker of the running test. */
let quotaRefusals: string[] = [];
const observer: MemoryObserver = {
  transferred: () => undefined,
  denied: () => undefined,
  evicted: () => undefined,
  checkpointSkipped: () => undefined,
  quotaRefused: (tenant, quota) => quotaRefusals.push(`${tenant}:${quota}`),
};
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** A worker's memory with the worker's default quotas, and one agent per call of `agent`, in any tenant. */
async function worker() {
  const dir = mkdtempSync(join(tmpdir(), 'kvfabric-quotas-'));
  quotaRefusals = [];
  const fx = await openMemory(dir, { blockCount: DEVICE_BLOCKS, quotas: {}, observer });
  cleanups.push(async () => {
    await fx.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { fx, agent: (agentId: string, tenant: string) => agentOf(fx, agentId, tenant) };
}

/** An allocated agent with its own ordinary token (the caller rights), and its turns in order. */
async function agentOf(fx: MemoryFixture, agentId: string, tenant: string) {
  const token = fx.token(agentId, tenant);
  await fx.allocate(agentId, token, { tenant });
  let digest: DigestState = emptyDigest();
  let turn = 0;
  return {
    id: agentId,
    async turn(blocks: number) {
      const result = await fx.turn(agentId, token, turn, blocks * TOKENS_PER_BLOCK, digest, tenant);
      digest = result.digest;
      turn++;
      return result;
    },
    pin: () => fx.memory.pin(fx.call(agentId, tenant, 'pin', token)),
    residency: () => fx.tiers.residency(agentId),
  };
}

describe('pin starvation', () => {
  it("caps one tenant's pins at its pinned share, so the others' next and first turns still run", async () => {
    const { fx, agent } = await worker();
    const regular = await agent('regular', 'acme');
    await regular.turn(1);
    // The attack: eight contexts of 8 blocks each, every one pinned, would fill the whole device.
    const refusals: unknown[] = [];
    for (let i = 0; i < 8; i++) {
      const hog = await agent(`hog-${i}`, 'mallory');
      await hog.turn(8);
      await hog.pin().catch((err: unknown) => refusals.push(err));
    }
    // Another tenant's next turn, and a new agent's first turn, both find room.
    await expect(regular.turn(1)).resolves.toMatchObject({ tier: 'device', tokens: 2 * TOKENS_PER_BLOCK });
    const newcomer = await agent('newcomer', 'acme');
    await expect(newcomer.turn(4)).resolves.toMatchObject({ tier: 'device', tokens: 4 * TOKENS_PER_BLOCK });
    // Half the device (the default pinned share) is the most one tenant pins.
    expect(refusals).toHaveLength(4);
    expect(refusals[0]).toMatchObject({ code: 'RESOURCE_EXHAUSTED', message: expect.stringContaining('pinned-block quota') });
    // Typed across the activity boundary, and not retried: only the tenant's own unpin makes room.
    expect(toApplicationFailure(refusals[0])).toMatchObject({ type: 'RESOURCE_EXHAUSTED', nonRetryable: true });
    expect(quotaRefusals).toEqual(['mallory:pinned', 'mallory:pinned', 'mallory:pinned', 'mallory:pinned']);
    const pinned = [...Array(8).keys()].filter((i) => fx.memory.snapshot(`hog-${i}`).pinned);
    expect(pinned).toEqual([0, 1, 2, 3]);
  });

  it("refuses a tenant at its device quota rather than evict another tenant's context", async () => {
    const { fx, agent } = await worker();
    const idle = await agent('idle', 'acme');
    await idle.turn(16); // a quarter of the device, idle from now on
    for (let i = 0; i < 4; i++) {
      const hog = await agent(`hog-${i}`, 'mallory');
      await hog.turn(8);
      await hog.pin();
    }
    const grower = await agent('grower', 'mallory');
    await grower.turn(16); // mallory now holds 48 blocks: three quarters, the default device share
    await fx.tiers.idle(); // background demotion (below the low watermark) has run
    // More would come only from acme's idle context: refused, naming the quota, and acme's context stays.
    await expect(grower.turn(1)).rejects.toMatchObject({
      code: 'RESOURCE_EXHAUSTED',
      message: expect.stringContaining('device-block quota'),
    });
    await fx.tiers.idle();
    expect(idle.residency()).toBe('device');
    expect(fx.memory.snapshot('grower').tokens).toBe(16 * TOKENS_PER_BLOCK); // nothing appended
    expect(quotaRefusals).toEqual(['mallory:device']);
    expect(fx.memory.tenantBlocks()).toEqual([
      expect.objectContaining({ tenant: expect.stringMatching(/^(acme|mallory)$/) }),
      expect.objectContaining({ tenant: expect.stringMatching(/^(acme|mallory)$/) }),
    ]);
    const mallory = fx.memory.tenantBlocks().find((blocks) => blocks.tenant === 'mallory');
    expect(mallory).toMatchObject({ device: 48, pinned: 32 });
  });

  it('evicts from the tenant over its fair share first, not the least recently used context', async () => {
    const { fx, agent } = await worker();
    const older = await agent('older', 'acme');
    await older.turn(8); // acme's least recently used context
    const active = await agent('active', 'acme');
    await active.turn(8);
    for (let i = 0; i < 4; i++) {
      const hog = await agent(`hog-${i}`, 'mallory');
      await hog.turn(8);
      await hog.pin();
    }
    const spare = await agent('spare', 'mallory');
    await spare.turn(16); // mallory: 48 blocks, over its fair share of 32 (two tenants); the device is full
    // The background demotion that follows, and the next turn's own eviction, both take mallory's.
    await fx.tiers.idle();
    await active.turn(1);
    await fx.tiers.idle();
    expect(spare.residency()).toBe('host');
    expect(older.residency()).toBe('device');
  });
});
