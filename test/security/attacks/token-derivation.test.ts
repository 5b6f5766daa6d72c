// Attack class: the issuer derives tokens from tokens it never verified, and tokens that live for ever.
// A forged parent must not yield a child, a forged agent token must not yield a custodian (with any epoch
// it likes), a forged or foreign token must not be renewed, and no token may outlive the configured cap:
// the issuer refuses to mint one and every worker refuses to accept one, whoever signed it.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { agentWorkflowId } from '../../../src/identity/agent-identity';
import { CapabilityIssuer, readClaimsUnverified, signCompact } from '../../../src/security/capability-issuer';
import { CapabilityVerifier, DEFAULT_MAX_CAPABILITY_LIFETIME_S } from '../../../src/security/capability-verifier';
import { CAPABILITY_AUDIENCE, CAPABILITY_ISSUER, CALLER_RIGHTS } from '../../../src/security/claims';
import { ed25519PrivateKey } from '../../../src/security/key-list';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { TEST_SIGNING_KEYS, TEST_TRUSTED_KEYS } from '../test-keys';

let dir: string;
let fx: MemoryFixture;
const issuer = new CapabilityIssuer(TEST_SIGNING_KEYS);
const header = { alg: 'EdDSA', kid: TEST_SIGNING_KEYS[0]!.id };

/** Claims as a real token has them, signed with a key nobody trusts (the attacker's). */
function forged(overrides: Record<string, unknown> = {}): string {
  const now = Math.floor(Date.now() / 1000);
  const claims = {
    iss: CAPABILITY_ISSUER,
    aud: CAPABILITY_AUDIENCE,
    ten: 'acme',
    sub: 'victim',
    ctx: 'victim',
    wf: agentWorkflowId('victim'),
    rights: [...CALLER_RIGHTS],
    epoch: Number.MAX_SAFE_INTEGER,
    jti: 'x',
    iat: now,
    nbf: now,
    exp: 16_725_225_600,
    ...overrides,
  };
  return signCompact(header, claims, ed25519PrivateKey(randomBytes(32)));
}

/** Signed with the real key, claiming what a misconfigured issuer (or a stolen key) might put in. */
function signedByTheIssuer(overrides: Record<string, unknown>): string {
  return signCompact(
    header,
    { ...readClaimsUnverified(issuer.mint({ tenant: 'acme', agentId: 'victim', workflowId: agentWorkflowId('victim') })), ...overrides },
    ed25519PrivateKey(TEST_SIGNING_KEYS[0]!.key),
  );
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-attack-derive-'));
  fx = await openMemory(dir);
});
afterAll(async () => {
  await fx?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('attack: deriving from an unverified token', () => {
  it.each([
    ['mintChild from a forged parent', () => issuer.mintChild(forged(), { agentId: 'child', workflowId: agentWorkflowId('child') })],
    ['mintCustodian from a forged agent token (epoch 2^53-1)', () => issuer.mintCustodian(forged())],
    ['renewal of a forged token', () => issuer.renewal(forged())],
    [
      'mintChild from an expired parent',
      () => issuer.mintChild(signedByTheIssuer({ exp: 1000, iat: 0, nbf: 0 }), { agentId: 'c', workflowId: agentWorkflowId('c') }),
    ],
    ['mintCustodian from garbage', () => issuer.mintCustodian('a.b.c')],
  ])('%s: PERMISSION_DENIED, nothing minted', (_name, derive) => {
    expect(derive).toThrow(expect.objectContaining({ code: 'PERMISSION_DENIED' }));
  });

  it('derives from a genuine token only what it holds: no fork right, no child; a custodian is no source', () => {
    const resumeOnly = issuer.mint({ tenant: 'acme', agentId: 'p', workflowId: agentWorkflowId('p'), rights: ['resume'] });
    expect(() => issuer.mintChild(resumeOnly, { agentId: 'c', workflowId: agentWorkflowId('c') })).toThrow(
      expect.objectContaining({ code: 'PERMISSION_DENIED' }),
    );
    const custodian = issuer.mintCustodian(issuer.mint({ tenant: 'acme', agentId: 'p', workflowId: agentWorkflowId('p') }));
    expect(() => issuer.mintCustodian(custodian)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => issuer.renewal(custodian)).toThrow(expect.objectContaining({ code: 'PERMISSION_DENIED' }));
  });

  it('keeps tenant, rights, expiry and epoch of a genuine source (property)', () => {
    fc.assert(
      fc.property(
        fc.subarray([...CALLER_RIGHTS], { minLength: 1 }),
        fc.integer({ min: 60, max: DEFAULT_MAX_CAPABILITY_LIFETIME_S }),
        (rights, lifetimeS) => {
          const parent = issuer.mint({
            tenant: 'acme',
            agentId: 'p',
            workflowId: agentWorkflowId('p'),
            rights: [...rights, 'fork'],
            lifetimeS,
          });
          const source = readClaimsUnverified(parent);
          const child = readClaimsUnverified(
            issuer.mintChild(parent, { agentId: 'c', workflowId: agentWorkflowId('c'), rights: [...CALLER_RIGHTS] }),
          );
          expect(child.ten).toBe('acme');
          expect(child.rights.every((right) => source.rights.includes(right))).toBe(true);
          expect(child.exp).toBeLessThanOrEqual(source.exp);
          expect(child.fork).toEqual(expect.any(String));
          const custodian = readClaimsUnverified(issuer.mintCustodian(parent));
          expect(custodian).toMatchObject({ epoch: source.epoch, exp: source.exp, rights: ['custody'] });
          if (!source.rights.includes('renew')) {
            expect(() => issuer.renewal(parent)).toThrow(expect.objectContaining({ code: 'PERMISSION_DENIED' }));
            return;
          }
          const renewed = readClaimsUnverified(issuer.renewal(parent, { rights: [...CALLER_RIGHTS] }));
          expect(renewed.rights.every((right) => source.rights.includes(right))).toBe(true);
        },
      ),
      { numRuns: 50 },
    );
  });
});

describe('attack: a token that lives for ever', () => {
  it('the issuer refuses to mint past its cap', () => {
    const capped = new CapabilityIssuer(TEST_SIGNING_KEYS, { maxLifetimeS: 3600 });
    expect(() => capped.mint({ tenant: 'acme', agentId: 'a', workflowId: agentWorkflowId('a'), lifetimeS: 3601 })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(() => capped.mint({ tenant: 'acme', agentId: 'a', workflowId: agentWorkflowId('a'), lifetimeS: 3600 })).not.toThrow();
  });

  it('a worker refuses a genuinely signed token expiring in 2500, audited, and a shorter cap refuses more', async () => {
    await fx.allocate('victim', fx.token('victim'));
    const calls = fx.tierCalls.length;
    const longLived = signedByTheIssuer({ exp: 16_725_225_600 }); // 2500-01-01
    await expect(fx.memory.admit(fx.call('victim', 'acme', 'resume', longLived))).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining('lifetime-too-long'),
    });
    expect(fx.tierCalls.slice(calls)).toEqual([]);
    expect(readFileSync(fx.auditFile, 'utf8')).toContain('"reason":"lifetime-too-long"');

    const strict = new CapabilityVerifier(TEST_TRUSTED_KEYS, { maxLifetimeS: 3600 });
    expect(() => strict.verify(issuer.mint({ tenant: 'acme', agentId: 'a', workflowId: agentWorkflowId('a'), lifetimeS: 7200 }))).toThrow(
      /lifetime-too-long/,
    );
    expect(strict.verify(issuer.mint({ tenant: 'acme', agentId: 'a', workflowId: agentWorkflowId('a'), lifetimeS: 3600 })).sub).toBe('a');
    // An issue time in the past does not stretch the cap: the expiry itself may be at most the cap ahead.
    expect(() =>
      strict.verify(signedByTheIssuer({ iat: Math.floor(Date.now() / 1000) + 7000, nbf: 0, exp: Math.floor(Date.now() / 1000) + 7200 })),
    ).toThrow(/lifetime-too-long/);
  });
});
