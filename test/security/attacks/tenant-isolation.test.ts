// Sharing happens inside one tenant: a fork whose child token names another tenant (or more rights than
// the parent holds) is refused before any block is shared, and per-tenant statistics count only that
// tenant's contexts. Block scrubbing between tenants is the allocator's (test/fabric).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { emptyDigest } from '../../../src/agent-memory/context-digest';
import { readClaimsUnverified } from '../../../src/security/capability-issuer';
import { agentWorkflowId } from '../../../src/identity/agent-identity';
import { openMemory, type MemoryFixture } from '../memory-fixture';

let dir: string;
let fx: MemoryFixture;
let parent: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-tenants-'));
  fx = await openMemory(dir);
  parent = fx.token('planner', 'acme', { rights: ['resume', 'turn', 'fork', 'release'] });
  await fx.allocate('planner', parent);
  await fx.turn('planner', parent, 0, 40, emptyDigest());
  const globex = fx.token('assistant', 'globex');
  await fx.allocate('assistant', globex, { tenant: 'globex' });
  await fx.turn('assistant', globex, 0, 100, emptyDigest(), 'globex');
});
afterAll(async () => {
  await fx?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function fork(childToken: string, childId = 'child') {
  const child = {
    contextId: childId,
    agentId: childId,
    tenant: 'acme',
    workflowId: agentWorkflowId(childId),
    action: 'fork' as const,
    token: childToken,
  };
  return fx.memory.fork(fx.call('planner', 'acme', 'fork', parent), child, {
    childCustodian: fx.issuer.mintCustodian(childToken),
    checkpoint: false,
  });
}

describe('tenant isolation', () => {
  it('refuses a cross-tenant fork before sharing a block', async () => {
    const before = fx.tiers.stats();
    const calls = fx.tierCalls.length;
    await expect(fork(fx.token('child', 'globex', { fork: 'f-1' }))).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining('cross-tenant'),
    });
    expect(fx.tierCalls.slice(calls).filter((name) => name === 'fork')).toEqual([]);
    expect(fx.memory.holds('child')).toBe(false);
    expect(fx.tiers.stats()).toEqual(before);
  });

  it('refuses a fork whose child token holds rights its parent lacks', async () => {
    await expect(fork(fx.token('child', 'acme', { rights: ['resume', 'suspend'], fork: 'f-1' }))).rejects.toMatchObject({
      message: expect.stringContaining('rights-escalation'),
    });
    expect(fx.memory.holds('child')).toBe(false);
  });

  it('forks within the tenant with a child token minted from the parent', async () => {
    const child = fx.issuer.mintChild(parent, { agentId: 'child', workflowId: agentWorkflowId('child') });
    expect(readClaimsUnverified(child).rights).toEqual(['resume', 'turn', 'fork', 'release']);
    await fork(child);
    expect(fx.memory.snapshot('child')).toMatchObject({ tokens: 40, sharedBlocks: 3 });
    // The parent's token does not open the child, nor the child's the parent.
    await expect(fx.memory.admit(fx.call('child', 'acme', 'turn', parent))).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    await expect(fx.memory.admit(fx.call('planner', 'acme', 'turn', child))).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
  });

  it("reports each tenant's statistics from its own contexts only", () => {
    expect(fx.memory.tenantStats('acme')).toEqual({ contexts: 2, tokens: 80, blocks: 6, sharedBlocks: 6 });
    expect(fx.memory.tenantStats('globex')).toEqual({ contexts: 1, tokens: 100, blocks: 7, sharedBlocks: 0 });
    expect(fx.memory.tenantStats('initech')).toEqual({ contexts: 0, tokens: 0, blocks: 0, sharedBlocks: 0 });
  });
});
