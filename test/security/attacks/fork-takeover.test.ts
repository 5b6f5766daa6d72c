// Attack class: a fork onto an agent that exists. Within one tenant, a caller forks with a sibling's id (or
// a typo of one) hoping the worker takes the sibling's context as the fork's retry, and that the
// workflow's undo after the failed child start then releases it. Or it asks the issuer for a child token
// under the sibling's id and presents that token to the sibling directly. Every path must leave the
// sibling exactly as it was, and its owner able to use it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { AllocateRequest, ForkRequest } from '../../../src/activities';
import { emptyDigest, type DigestState } from '../../../src/agent-memory/context-digest';
import { agentWorkflowId } from '../../../src/identity/agent-identity';
import { MODELS } from '../../../src/engines/models';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { activitiesOf, as, denials, workflowOf, type Activities } from './activity-fixture';

let dir: string;
let fx: MemoryFixture;
let activities: Activities;
let parentToken: string;
let siblingToken: string;
let siblingDigest: DigestState;
let operation = 100;

const allocation = (agentId: string, capability: string): AllocateRequest => ({
  agentId,
  tenant: 'acme',
  capability,
  operationId: `${agentId}:0`,
  shape: MODELS.tiny!.shape,
  tokensPerBlock: MODELS.tiny!.tokensPerBlock,
  checkpoint: true,
});
const shareOf = (childId: string, childCapability: string, operationId = `parent:${operation++}`): ForkRequest => ({
  agentId: 'parent',
  tenant: 'acme',
  capability: parentToken,
  operationId,
  childId,
  childCapability,
  childCustodian: fx.issuer.mintCustodian(childCapability),
  checkpoint: false,
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-attack-fork-'));
  fx = await openMemory(dir);
  activities = activitiesOf(fx);
  parentToken = fx.token('parent');
  siblingToken = fx.token('sibling');
  await as(workflowOf('parent'), () => activities.placement.allocate(allocation('parent', parentToken)));
  await as(workflowOf('sibling'), () => activities.placement.allocate(allocation('sibling', siblingToken)));
  await as(workflowOf('parent'), () =>
    activities.holder.turn({
      agentId: 'parent',
      tenant: 'acme',
      capability: parentToken,
      operationId: 'parent:1',
      turn: 0,
      tokens: 32,
      before: emptyDigest(),
      checkpoint: false,
    }),
  );
  siblingDigest = (
    await as(workflowOf('sibling'), () =>
      activities.holder.turn({
        agentId: 'sibling',
        tenant: 'acme',
        capability: siblingToken,
        operationId: 'sibling:1',
        turn: 0,
        tokens: 20,
        before: emptyDigest(),
        checkpoint: true,
      }),
    )
  ).digest;
});
afterAll(async () => {
  await fx?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The sibling as its owner sees it: same bytes, same grant, its own token still opens it. */
async function expectSiblingIntact(): Promise<void> {
  expect(fx.memory.snapshot('sibling')).toMatchObject({ tokens: 20, sharedBlocks: 0 });
  expect(await fx.memory.resume(fx.call('sibling', 'acme', 'resume', siblingToken), { expected: siblingDigest })).toMatchObject({
    digest: siblingDigest,
  });
  await expect(fx.memory.admit(fx.call('sibling', 'acme', 'resume', siblingToken))).resolves.toMatchObject({ sub: 'sibling' });
}

describe('attack: fork onto an existing agent', () => {
  it("refuses the share with PERMISSION_DENIED (context-exists), audited; the workflow's undo then releases nothing", async () => {
    const childCapability = fx.issuer.mintChild(parentToken, { agentId: 'sibling', workflowId: agentWorkflowId('sibling') });
    const audits = denials(fx).length;
    const calls = fx.tierCalls.length;
    await expect(as(workflowOf('parent'), () => activities.holder.fork(shareOf('sibling', childCapability)))).rejects.toMatchObject({
      type: 'PERMISSION_DENIED',
      message: expect.stringContaining('context-exists'),
    });
    expect(fx.tierCalls.slice(calls).filter((name) => name !== 'has')).toEqual([]); // nothing forked, nothing written
    expect(denials(fx).slice(audits)).toEqual([expect.objectContaining({ context: 'sibling', action: 'fork', reason: 'context-exists' })]);

    // The workflow undoes a fork whose child did not start: with the parent's token and this fork's child token.
    const undone = await as(workflowOf('parent'), () => activities.holder.unfork(shareOf('sibling', childCapability)));
    expect(undone).toMatchObject({ tokens: 32, sharedBlocks: 0 });
    await expectSiblingIntact();
  });

  it('refuses a typo of a sibling that exists on disk only, held by no worker', async () => {
    const typo = fx.token('sibling-2');
    await as(workflowOf('sibling-2'), () => activities.placement.allocate(allocation('sibling-2', typo)));
    await fx.memory.suspend(fx.call('sibling-2', 'acme', 'suspend', typo), { tier: 'disk' });
    await fx.tiers.dropLocalCopy('sibling-2'); // its worker is gone: only the grant and the durable copy remain
    const childCapability = fx.issuer.mintChild(parentToken, { agentId: 'sibling-2', workflowId: agentWorkflowId('sibling-2') });
    await expect(as(workflowOf('parent'), () => activities.holder.fork(shareOf('sibling-2', childCapability)))).rejects.toMatchObject({
      type: 'PERMISSION_DENIED',
      message: expect.stringContaining('context-exists'),
    });
    expect(fx.memory.holds('sibling-2')).toBe(false);
  });

  it("refuses a child token minted under the sibling's id when presented to the sibling itself (not-owner)", async () => {
    const hijack = fx.issuer.mintChild(parentToken, { agentId: 'sibling', workflowId: agentWorkflowId('sibling') });
    const audits = denials(fx).length;
    for (const action of ['resume', 'turn', 'release', 'renew'] as const) {
      await expect(fx.memory.admit(fx.call('sibling', 'acme', action, hijack))).rejects.toMatchObject({
        code: 'PERMISSION_DENIED',
        message: expect.stringContaining('not-owner'),
      });
    }
    // Through the activity as the sibling's own workflow would call it: still refused.
    await expect(
      as(workflowOf('sibling'), () =>
        activities.holder.release({ agentId: 'sibling', tenant: 'acme', capability: hijack, operationId: 'sibling:9' }),
      ),
    ).rejects.toMatchObject({ type: 'PERMISSION_DENIED' });
    expect(
      denials(fx)
        .slice(audits)
        .map((line) => line.reason),
    ).toEqual(['not-owner', 'not-owner', 'not-owner', 'not-owner', 'not-owner']);
    await expectSiblingIntact();
  });

  it("refuses an agent's own token as a child token (not-a-fork-token)", async () => {
    const plain = fx.token('fresh-child');
    await expect(as(workflowOf('parent'), () => activities.holder.fork(shareOf('fresh-child', plain)))).rejects.toMatchObject({
      type: 'PERMISSION_DENIED',
      message: expect.stringContaining('not-a-fork-token'),
    });
    expect(fx.memory.holds('fresh-child')).toBe(false);
  });

  it('still forks a new child, answers a retry of the same fork after the record was lost, and undoes only its own child', async () => {
    const childCapability = fx.issuer.mintChild(parentToken, { agentId: 'child', workflowId: agentWorkflowId('child') });
    const request = shareOf('child', childCapability);
    const shared = await as(workflowOf('parent'), () => activities.holder.fork(request));
    expect(shared.child).toMatchObject({ tokens: 32, sharedBlocks: 2 });
    // The same fork again from a worker whose journal lost the record (a new activities instance): its own grant, no error.
    const again = await as(workflowOf('parent'), () => activitiesOf(fx).holder.fork({ ...request, operationId: `parent:${operation++}` }));
    expect(again.child.tokens).toBe(32);
    // Another fork's token for the same child id cannot undo it.
    const otherFork = fx.issuer.mintChild(parentToken, { agentId: 'child', workflowId: agentWorkflowId('child') });
    await as(workflowOf('parent'), () => activities.holder.unfork(shareOf('child', otherFork)));
    expect(fx.memory.holds('child')).toBe(true);
    // Its own undo does.
    await as(workflowOf('parent'), () => activities.holder.unfork(shareOf('child', childCapability)));
    expect(fx.memory.holds('child')).toBe(false);
  });
});
