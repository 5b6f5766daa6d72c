// The attack table: every way a caller might get at a context it does not own with a token it should not
// have (forged, altered, alg none, a foreign key id, expired, revoked, another tenant, agent or workflow,
// a custodian for a caller's action). Each case calls the worker's activity as the agent's own workflow
// would, inside an activity context, and expects PERMISSION_DENIED with its reason, checks that the tier
// layer was not touched at all (no read, no write), that the context's bytes and the pool are as they
// were, and that the denial was audited without the token.
import { createHmac, randomBytes, sign } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { emptyDigest, type DigestState } from '../../../src/agent-memory/context-digest';
import type { Operation } from '../../../src/operations/operations';
import { CapabilityIssuer, readClaimsUnverified, signCompact } from '../../../src/security/capability-issuer';
import { CapabilityVerifier } from '../../../src/security/capability-verifier';
import { ed25519PrivateKey, ed25519PublicOf } from '../../../src/security/key-list';
import { agentWorkflowId } from '../../../src/identity/agent-identity';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { TEST_SIGNING_KEYS, TEST_TRUSTED_KEYS } from '../test-keys';
import { activitiesOf, as, workflowOf, type Activities } from './activity-fixture';

let dir: string;
let fx: MemoryFixture;
let owner: string;
let digest: DigestState;
let released: string;
let activities: Activities;
let operation = 1;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-attacks-'));
  fx = await openMemory(dir);
  activities = activitiesOf(fx);
  owner = fx.token('planner');
  await fx.allocate('planner', owner, { checkpoint: true });
  digest = (await fx.turn('planner', owner, 0, 40, emptyDigest())).digest;
  // Tokens older than the owner's are revoked for this context (as after a hand-off).
  await fx.capabilities.revoke('planner', readClaimsUnverified(owner).epoch);
  // A context released by its owner: its token must not work again.
  released = fx.token('gone');
  await fx.allocate('gone', released);
  await fx.memory.release(fx.call('gone', 'acme', 'release', released));
});
afterAll(async () => {
  await fx?.close();
  rmSync(dir, { recursive: true, force: true });
});

const b64 = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
const claimsOf = () => readClaimsUnverified(owner);
const header = { alg: 'EdDSA', kid: TEST_SIGNING_KEYS[0]!.id };

interface Attack {
  name: string;
  reason: string;
  token: () => unknown;
  context?: string;
  action?: Operation;
}

const ATTACKS: Attack[] = [
  {
    name: 'forged signature (same key id, attacker key)',
    reason: 'bad-signature',
    token: () => signCompact(header, claimsOf(), ed25519PrivateKey(randomBytes(32))),
  },
  {
    name: 'unknown key id',
    reason: 'unknown-key',
    token: () =>
      new CapabilityIssuer([{ id: 'evil', key: randomBytes(32) }]).mint({
        tenant: 'acme',
        agentId: 'planner',
        workflowId: agentWorkflowId('planner'),
      }),
  },
  {
    name: 'a key the worker does not trust (retired issuer key)',
    reason: 'unknown-key',
    token: () =>
      new CapabilityIssuer([{ id: 'retired-2023', key: randomBytes(32) }]).mint({
        tenant: 'acme',
        agentId: 'planner',
        workflowId: agentWorkflowId('planner'),
      }),
  },
  {
    name: 'expired',
    reason: 'expired',
    token: () =>
      new CapabilityIssuer(TEST_SIGNING_KEYS, { clock: () => Date.now() - 7200_000 }).mint({
        tenant: 'acme',
        agentId: 'planner',
        workflowId: agentWorkflowId('planner'),
        lifetimeS: 3600,
      }),
  },
  { name: 'not yet valid', reason: 'not-yet-valid', token: () => fx.token('planner', 'acme', { notBeforeS: 3600 }) },
  {
    name: 'wrong agent',
    reason: 'wrong-agent',
    token: () => fx.token('mallory', 'acme', { contextId: 'planner', workflowId: agentWorkflowId('planner') }),
  },
  { name: 'wrong context (another agent of the same tenant)', reason: 'wrong-context', token: () => fx.token('critic') },
  { name: 'wrong tenant', reason: 'wrong-tenant', token: () => fx.token('planner', 'globex') },
  { name: 'wrong workflow', reason: 'wrong-workflow', token: () => fx.token('planner', 'acme', { workflowId: 'kvagent-mallory' }) },
  {
    name: 'missing right (resume-only token turns)',
    reason: 'missing-right',
    token: () => fx.token('planner', 'acme', { rights: ['resume'] }),
  },
  { name: 'revoked by epoch', reason: 'revoked', token: () => fx.token('planner', 'acme', { epoch: claimsOf().epoch - 1 }) },
  { name: 'replay after release', reason: 'revoked', token: () => released, context: 'gone', action: 'resume' },
  {
    name: 'tampered claims (rights widened, signature kept)',
    reason: 'bad-signature',
    token: () => {
      const limited = fx.token('planner', 'acme', { rights: ['resume'] });
      const [h, , s] = limited.split('.');
      return `${h}.${b64({ ...readClaimsUnverified(limited), rights: ['turn', 'resume'] })}.${s}`;
    },
  },
  { name: 'alg "none"', reason: 'bad-header', token: () => `${b64({ alg: 'none', typ: 'JWT', kid: header.kid })}.${b64(claimsOf())}.AA` },
  { name: 'alg "none", empty signature', reason: 'malformed', token: () => `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claimsOf())}.` },
  {
    name: 'algorithm confusion (HS256 keyed with the public key)',
    reason: 'bad-header',
    token: () => {
      const input = `${b64({ alg: 'HS256', typ: 'JWT', kid: header.kid })}.${b64(claimsOf())}`;
      return `${input}.${createHmac('sha256', TEST_TRUSTED_KEYS[0]!.key).update(input).digest('base64url')}`;
    },
  },
  {
    name: 'embedded key in the header',
    reason: 'bad-header',
    token: () => {
      const evil = randomBytes(32);
      const jwk = { kty: 'OKP', crv: 'Ed25519', x: ed25519PublicOf(evil).toString('base64url') };
      const input = `${b64({ ...header, jwk })}.${b64(claimsOf())}`;
      return `${input}.${sign(null, Buffer.from(input), ed25519PrivateKey(evil)).toString('base64url')}`;
    },
  },
  {
    name: 'a header with one more member (typ), signed by the issuer key',
    reason: 'bad-header',
    token: () => signCompact({ ...header, typ: 'JWT' }, claimsOf(), ed25519PrivateKey(TEST_SIGNING_KEYS[0]!.key)),
  },
  {
    name: 'issued an hour ahead with no nbf, signed by the issuer key: iat stands in for nbf',
    reason: 'not-yet-valid',
    token: () => {
      const now = Math.floor(Date.now() / 1000);
      const { nbf: _nbf, ...claims } = { ...claimsOf(), iat: now + 3600, exp: now + 7200 };
      return signCompact(header, claims, ed25519PrivateKey(TEST_SIGNING_KEYS[0]!.key));
    },
  },
  { name: 'oversized', reason: 'oversized', token: () => `${owner}${'A'.repeat(4096)}` },
  { name: 'garbage string', reason: 'malformed', token: () => 'definitely not a token' },
  { name: 'not a string', reason: 'malformed', token: () => ({ capability: owner }) },
  // The token the agent's workflow carries: good for its own moves (below), refused for a caller's.
  ...(['turn', 'resume', 'fork', 'release', 'unpin', 'renew'] as const).map((action) => ({
    name: `custodian token (the one the workflow carries) for ${action}`,
    reason: 'custodian-token',
    token: () => fx.issuer.mintCustodian(owner),
    action,
  })),
];

/** A fork's child token and its custodian, minted from `parent` for `childId`. */
function childTokens(parent: string, childId: string): { childCapability: string; childCustodian: string } {
  const childCapability = fx.issuer.mintChild(parent, { agentId: childId, workflowId: agentWorkflowId(childId) });
  return { childCapability, childCustodian: fx.issuer.mintCustodian(childCapability) };
}

/** A renewal's replacement token and its custodian. */
function nextTokens(next: string): { next: string; nextCustodian: string; token: string; custodian: string } {
  const custodian = fx.issuer.mintCustodian(next);
  return { next, nextCustodian: custodian, token: next, custodian };
}

/** The worker's activity for `action` on `context`, presenting `token`, as the agent's workflow calls it. */
function activityCall(action: Operation, context: string, token: unknown): Promise<unknown> {
  const request = { agentId: context, tenant: 'acme', capability: token as string, operationId: `${context}:${operation++}` };
  const { holder: calls } = activities;
  switch (action) {
    case 'turn':
      return calls.turn({ ...request, turn: 1, tokens: 8, before: digest, checkpoint: false });
    case 'resume':
      return calls.resume({ ...request, expected: digest });
    case 'fork':
      return calls.fork({ ...request, childId: 'attack-child', ...childTokens(owner, 'attack-child'), checkpoint: false });
    case 'release':
      return calls.release(request);
    case 'unpin':
      return calls.unpin(request);
    case 'renew':
      return calls.renew({ ...request, ...nextTokens(fx.token(context, 'acme', { epoch: Date.now() + 60_000 })) });
    default:
      throw new Error(`no activity for ${action} in this table`);
  }
}

describe('capability attacks', () => {
  it.each(ATTACKS)('$name: PERMISSION_DENIED ($reason), nothing read or changed, audited', async (attack) => {
    const context = attack.context ?? 'planner';
    const before = { pool: fx.tiers.stats(), snapshot: context === 'planner' ? fx.memory.snapshot('planner') : undefined };
    const calls = fx.tierCalls.length;
    const token = attack.token();
    const denied = as(workflowOf(context), () => activityCall(attack.action ?? 'turn', context, token));
    await expect(denied).rejects.toMatchObject({ type: 'PERMISSION_DENIED', message: expect.stringContaining(attack.reason) });
    const message = ((await denied.catch((err: unknown) => err)) as Error).message;
    if (typeof token === 'string') expect(message).not.toContain(token.slice(0, 40));

    expect(fx.tierCalls.slice(calls)).toEqual([]); // the tier layer was not touched: nothing read, nothing written
    expect(fx.tiers.stats()).toEqual(before.pool);
    if (before.snapshot) expect(fx.memory.snapshot('planner')).toEqual(before.snapshot);

    const lines = readFileSync(fx.auditFile, 'utf8').trim().split('\n');
    const last = JSON.parse(lines.at(-1)!) as Record<string, unknown>;
    expect(last).toMatchObject({ agent: context, tenant: 'acme', context, reason: attack.reason });
    if (typeof token === 'string') expect(lines.join('\n')).not.toContain(token.split('.')[2] || token.slice(0, 40));
  });

  it("leaves the owner's context intact: the owner's token still works and the bytes verify", async () => {
    const claims = await fx.memory.admit(fx.call('planner', 'acme', 'resume', owner));
    expect(claims).toMatchObject({ ten: 'acme', sub: 'planner', ctx: 'planner', wf: agentWorkflowId('planner') });
    expect(await fx.memory.resume(fx.call('planner', 'acme', 'resume', owner), { expected: digest })).toMatchObject({
      digest,
      tier: 'device',
    });
    expect(readFileSync(fx.auditFile, 'utf8')).not.toContain(owner.split('.')[2]!);
  });

  it('refuses a valid token whose tenant the grant does not name (the token is necessary, not sufficient)', async () => {
    // Authentic and consistent with the call, but the context was created by tenant acme: the grant decides.
    const calls = fx.tierCalls.length;
    const foreign = fx.token('planner', 'globex');
    await expect(fx.memory.admit(fx.call('planner', 'globex', 'turn', foreign))).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining('not-owner'),
    });
    expect(fx.tierCalls.slice(calls)).toEqual([]);
    // A context nobody created is not a permission question.
    await expect(fx.memory.admit(fx.call('nobody', 'acme', 'turn', fx.token('nobody')))).rejects.toMatchObject({ code: 'STALE_HANDLE' });
  });
});

describe('custodian token', () => {
  it("allows exactly the workflow's own moves: allocate, recover, suspend, pin", async () => {
    const custodian = fx.issuer.mintCustodian(owner);
    expect(readClaimsUnverified(custodian)).toMatchObject({
      rights: ['custody'],
      epoch: claimsOf().epoch,
      exp: claimsOf().exp,
      wf: agentWorkflowId('planner'),
    });
    for (const action of ['allocate', 'recover', 'suspend', 'pin'] as const) {
      await expect(fx.memory.admit(fx.call('planner', 'acme', action, custodian))).resolves.toMatchObject({ rights: ['custody'] });
    }
  });

  it('is revoked with the token it was minted with: a release ends both', async () => {
    const agent = fx.token('custodied');
    const custodian = fx.issuer.mintCustodian(agent);
    await fx.allocate('custodied', custodian);
    await fx.memory.release(fx.call('custodied', 'acme', 'release', agent));
    await expect(fx.memory.admit(fx.call('custodied', 'acme', 'suspend', custodian))).rejects.toMatchObject({
      message: expect.stringContaining('revoked'),
    });
  });

  it('must be the custodian of the token it comes with, at a renewal and at a fork; then nothing changed', async () => {
    const current = fx.token('guarded');
    await fx.allocate('guarded', current);
    const claims = readClaimsUnverified(current);
    const next = fx.token('guarded', 'acme', { epoch: claims.epoch + 10 });
    const renew = (custodian: string) => fx.memory.renew(fx.call('guarded', 'acme', 'renew', current), { token: next, custodian });
    const notCustodian = { code: 'PERMISSION_DENIED', message: expect.stringContaining('not-custodian') };
    await expect(renew(fx.issuer.mintCustodian(current))).rejects.toMatchObject(notCustodian); // another epoch
    await expect(renew(next)).rejects.toMatchObject(notCustodian); // a full token is no custodian
    await expect(renew(fx.token('guarded', 'acme', { epoch: claims.epoch + 10, rights: ['custody', 'turn'] }))).rejects.toMatchObject(
      notCustodian,
    );
    await expect(renew(fx.issuer.mintCustodian(fx.token('critic', 'acme', { epoch: claims.epoch + 10 })))).rejects.toMatchObject({
      message: expect.stringContaining('wrong-context'),
    });
    // Refused before anything was revoked: the current token still works.
    await expect(fx.memory.admit(fx.call('guarded', 'acme', 'resume', current))).resolves.toBeDefined();

    // The parent's expiry, as mintChild gives it: minted a second later, a child would outlive its parent.
    const asChild = { fork: 'f-guarded', expiresAtS: claims.exp };
    const child = fx.token('guarded-child', 'acme', asChild);
    const calls = fx.tierCalls.length;
    const olderCustodian = fx.issuer.mintCustodian(
      fx.token('guarded-child', 'acme', { ...asChild, epoch: readClaimsUnverified(child).epoch - 1 }),
    );
    const fork = fx.memory.fork(fx.call('guarded', 'acme', 'fork', current), fx.call('guarded-child', 'acme', 'fork', child), {
      childCustodian: olderCustodian,
      checkpoint: false,
    });
    await expect(fork).rejects.toMatchObject(notCustodian);
    expect(fx.tierCalls.slice(calls)).toEqual(['has']); // the parent's admission asked whether it is held; nothing else

    await renew(fx.issuer.mintCustodian(next));
    await expect(fx.memory.admit(fx.call('guarded', 'acme', 'resume', current))).rejects.toMatchObject({
      message: expect.stringContaining('revoked'),
    });
  });
});

describe('renewal', () => {
  it('refuses a replacement with more rights, an older epoch or another identity; accepts a fresh one and revokes the old', async () => {
    const limited = fx.token('renewing', 'acme', { rights: ['resume', 'turn', 'renew'] });
    await fx.allocate('renewing', limited);
    const current = readClaimsUnverified(limited);
    const replace = (token: string) => fx.memory.renew(fx.call('renewing', 'acme', 'renew', limited), nextTokens(token));
    const later = { epoch: current.epoch + 10 };
    await expect(replace(fx.token('renewing', 'acme', { ...later, rights: ['resume', 'turn', 'release', 'renew'] }))).rejects.toMatchObject(
      { message: expect.stringContaining('rights-escalation') },
    );
    await expect(replace(fx.token('renewing', 'acme', { rights: ['resume'], epoch: current.epoch }))).rejects.toMatchObject({
      message: expect.stringContaining('revoked'),
    });
    await expect(replace(fx.token('other', 'acme', later))).rejects.toMatchObject({ message: expect.stringContaining('wrong-context') });
    await expect(replace(fx.token('renewing', 'globex', later))).rejects.toMatchObject({
      message: expect.stringContaining('wrong-tenant'),
    });
    const next = fx.token('renewing', 'acme', { ...later, rights: ['resume'] });
    await replace(next);
    await expect(fx.memory.admit(fx.call('renewing', 'acme', 'resume', limited))).rejects.toMatchObject({
      message: expect.stringContaining('revoked'),
    });
    await expect(fx.memory.admit(fx.call('renewing', 'acme', 'resume', next))).resolves.toMatchObject({ rights: ['resume'] });
  });
});

describe('verifier', () => {
  it('accepts tokens of every trusted key id during a rotation, and drops a retired one', () => {
    const oldKey = { id: 'k-old', key: randomBytes(32) };
    const newKey = { id: 'k-new', key: randomBytes(32) };
    const pub = (k: { id: string; key: Buffer }) => ({ id: k.id, key: ed25519PublicOf(k.key) });
    const request = { tenant: 'acme', agentId: 'a', workflowId: agentWorkflowId('a') };
    const before = new CapabilityIssuer([oldKey]).mint(request);
    const after = new CapabilityIssuer([oldKey, newKey], { activeKeyId: 'k-new' }).mint(request);
    const during = new CapabilityVerifier([pub(oldKey), pub(newKey)]);
    expect(during.verify(before).sub).toBe('a');
    expect(during.verify(after).sub).toBe('a');
    const retired = new CapabilityVerifier([pub(newKey)]);
    expect(retired.verify(after).sub).toBe('a');
    expect(() => retired.verify(before)).toThrow(/unknown-key/);
  });

  it('mints fork tokens in the parent tenant with at most its rights and no later expiry', () => {
    const issuer = new CapabilityIssuer(TEST_SIGNING_KEYS);
    const parent = issuer.mint({
      tenant: 'acme',
      agentId: 'p',
      workflowId: agentWorkflowId('p'),
      rights: ['resume', 'turn', 'fork'],
      lifetimeS: 600,
    });
    const child = readClaimsUnverified(
      issuer.mintChild(parent, { agentId: 'c', workflowId: agentWorkflowId('c'), rights: ['turn', 'release'] }),
    );
    expect(child).toMatchObject({ ten: 'acme', sub: 'c', ctx: 'c', wf: 'kvagent-c', rights: ['turn'] });
    expect(child.exp).toBeLessThanOrEqual(readClaimsUnverified(parent).exp);
  });
});
