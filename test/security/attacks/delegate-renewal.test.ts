// Attack class: a narrow delegate revokes its owner. A renewal replaces the context's capability and
// revokes every older token, so a token given out to read (`resume` only) must not be able to renew, at a
// worker or at the issuer (which would turn a short-lived delegate into a day-long one), and a renewal
// never mints more than the presenter holds.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { RenewRequest } from '../../../src/activities';
import { AgentClient } from '../../../src/client/agent-client';
import { readClaimsUnverified } from '../../../src/security/capability-issuer';
import { MODELS } from '../../../src/engines/models';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { activitiesOf, as, denials, workflowOf, type Activities } from './activity-fixture';

let dir: string;
let fx: MemoryFixture;
let activities: Activities;
let owner: string;
let operation = 1;
/** The client's side of a renewal (`AgentHandle.renew` mints with it); no connection needed to mint. */
let agents: AgentClient;

const renewal = (capability: string, next: string): RenewRequest => ({
  agentId: 'owned',
  tenant: 'acme',
  capability,
  operationId: `owned:${operation++}`,
  next,
  nextCustodian: fx.issuer.mintCustodian(next),
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-attack-renew-'));
  fx = await openMemory(dir);
  activities = activitiesOf(fx);
  agents = new AgentClient(undefined as never, 'kvfabric', { issuer: fx.issuer });
  owner = fx.token('owned');
  await as(workflowOf('owned'), () =>
    activities.placement.allocate({
      agentId: 'owned',
      tenant: 'acme',
      capability: owner,
      operationId: 'owned:0',
      shape: MODELS.tiny!.shape,
      tokensPerBlock: 16,
      checkpoint: false,
    }),
  );
});
afterAll(async () => {
  await fx?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('attack: a narrow delegate renews', () => {
  it('the issuer refuses to renew a token without the `renew` right (a 60 s resume-only delegate stays 60 s)', () => {
    const delegate = fx.token('owned', 'acme', { rights: ['resume'], lifetimeS: 60 });
    for (const renew of [() => fx.issuer.renewal(delegate), () => agents.mintRenewal(delegate)])
      expect(renew).toThrow(
        expect.objectContaining({ code: 'PERMISSION_DENIED', message: 'cannot renew this capability: it has no renew right' }),
      );
    // With the right, the issuer renews, into the presenter's rights at most.
    const renewer = fx.token('owned', 'acme', { rights: ['resume', 'renew'], lifetimeS: 60 });
    expect(readClaimsUnverified(agents.mintRenewal(renewer)).rights).toEqual(['resume', 'renew']);
  });

  it("a resume-only token cannot renew (missing-right): the owner's token still works, audited", async () => {
    const delegate = fx.token('owned', 'acme', { rights: ['resume'] });
    // Minted by hand: the issuer itself refuses this renewal (above), a worker must too.
    const next = fx.token('owned', 'acme', { rights: ['resume'], epoch: Date.now() + 500 });
    const audits = denials(fx).length;
    await expect(as(workflowOf('owned'), () => activities.holder.renew(renewal(delegate, next)))).rejects.toMatchObject({
      type: 'PERMISSION_DENIED',
      message: expect.stringContaining('missing-right'),
    });
    expect(denials(fx).slice(audits)).toEqual([expect.objectContaining({ context: 'owned', action: 'renew', reason: 'missing-right' })]);
    await expect(fx.memory.admit(fx.call('owned', 'acme', 'release', owner))).resolves.toMatchObject({ sub: 'owned' });
  });

  it('a delegate given `renew` renews only into its own rights (rights-escalation otherwise)', async () => {
    const delegate = fx.token('owned', 'acme', { rights: ['resume', 'renew'] });
    const wider = fx.token('owned', 'acme', { rights: ['resume', 'renew', 'turn'], epoch: Date.now() + 1000 });
    await expect(as(workflowOf('owned'), () => activities.holder.renew(renewal(delegate, wider)))).rejects.toMatchObject({
      type: 'PERMISSION_DENIED',
      message: expect.stringContaining('rights-escalation'),
    });
    await expect(fx.memory.admit(fx.call('owned', 'acme', 'turn', owner))).resolves.toMatchObject({ sub: 'owned' });
  });

  it('the owner renews; a retry of that renewal is still answered, and the old tokens are revoked', async () => {
    const next = fx.token('owned', 'acme', { epoch: Date.now() + 2000 });
    const request = renewal(owner, next);
    await as(workflowOf('owned'), () => activities.holder.renew(request));
    await as({ ...workflowOf('owned'), attempt: 2 }, () => activities.holder.renew(request));
    await expect(fx.memory.admit(fx.call('owned', 'acme', 'resume', owner))).rejects.toMatchObject({
      message: expect.stringContaining('revoked'),
    });
    await expect(fx.memory.admit(fx.call('owned', 'acme', 'resume', next))).resolves.toMatchObject({ sub: 'owned' });
    // The same renewal replayed from another workflow finds no record, and its revoked token is refused.
    await expect(as(workflowOf('mallory'), () => activities.holder.renew(request))).rejects.toMatchObject({ type: 'PERMISSION_DENIED' });
  });
});
