// Attack class: records planted in the shared tier directory (issue 38, item 2). Grants, epochs, fences
// and tenant ids were plain files any writer of the directory could make: a user who can write the tier
// root (the docs leave the root's mode as it is) swapped the `grants` folder after the worker started
// (its folder is checked only at open), and the worker then refused the victim `not-owner` and admitted
// another tenant's token for the victim's id. An epoch entry planted or copied from another context
// revoked the victim's tokens; a planted fence stopped its holder; a rewritten tenant id file moved a
// tenant to another allocator id. Every record is now sealed with a MAC under a key derived from the
// workers' master keys, over its kind and context (src/shared-directory/record-seal.ts): a planted,
// altered or moved record is INTEGRITY, audited `forged-record`, and trusted by no one.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createHash, randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { HolderFences } from '../../../src/shared-directory/holder-fences';
import { RecordSeal } from '../../../src/shared-directory/record-seal';
import { preferredTenantId, TenantRegistry } from '../../../src/shared-directory/tenant-registry';
import { KeyRing } from '../../../src/tiers/cold';
import { posixStore, testRecordSeal } from '../../shared-directory/fixtures/test-records';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { denials, startAgent } from './activity-fixture';

let scratch: string;
let tier: string;
let fx: MemoryFixture;

/** The hashed name the shared directory files a context's records under. */
const hashed = (contextId: string) => createHash('sha256').update(contextId).digest('hex').slice(0, 40);
const grantFile = (grants: string, contextId: string) => join(grants, `${hashed(contextId)}.grant.json`);

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-attack-planted-'));
  tier = join(scratch, 'tier');
  fx = await openMemory(tier);
  await startAgent(fx, 'victim', 'acme');
  await startAgent(fx, 'intruder', 'globex');
});
afterAll(async () => {
  await fx?.close();
  rmSync(scratch, { recursive: true, force: true });
});

const admitVictimId = (tenant: string) => fx.memory.admit(fx.call('victim', tenant, 'turn', fx.token('victim', tenant)));
const forgedLines = (context: string) => denials(fx).filter((line) => line.reason === 'forged-record' && line.context === context);

describe('attack: records planted in the shared tier directory', () => {
  it('the grants folder swapped once the worker ran, a grant for another tenant planted on the victim id: nobody is admitted', async () => {
    const grants = join(tier, 'grants');
    const genuine = join(tier, 'grants.genuine');
    renameSync(grants, genuine);
    mkdirSync(grants, { mode: 0o700 });
    writeFileSync(grantFile(grants, 'victim'), JSON.stringify({ contextId: 'victim', tenant: 'globex', agentId: 'victim' }), {
      mode: 0o600,
    });
    try {
      await expect(admitVictimId('globex')).rejects.toMatchObject({ code: 'INTEGRITY' });
      await expect(admitVictimId('acme')).rejects.toMatchObject({ code: 'INTEGRITY' });
      expect(forgedLines('victim').length).toBeGreaterThanOrEqual(2);
    } finally {
      rmSync(grants, { recursive: true });
      renameSync(genuine, grants);
    }
    // The genuine folder back: the victim is admitted, the other tenant refused as before.
    await expect(admitVictimId('acme')).resolves.toMatchObject({ ten: 'acme' });
    await expect(admitVictimId('globex')).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
  });

  it("another context's genuine grant moved onto the victim id: INTEGRITY", async () => {
    const grants = join(tier, 'grants');
    const victim = grantFile(grants, 'victim');
    copyFileSync(victim, `${victim}.kept`);
    try {
      copyFileSync(grantFile(grants, 'intruder'), victim);
      await expect(admitVictimId('globex')).rejects.toMatchObject({ code: 'INTEGRITY' });
    } finally {
      renameSync(`${victim}.kept`, victim);
    }
    await expect(admitVictimId('acme')).resolves.toMatchObject({ ten: 'acme' });
  });

  it('a grant sealed under a key the workers lack, or a genuine record of another kind for the victim: INTEGRITY', async () => {
    const victim = grantFile(join(tier, 'grants'), 'victim');
    copyFileSync(victim, `${victim}.kept`);
    const planted = JSON.stringify({ contextId: 'victim', tenant: 'globex', agentId: 'victim' });
    const outsider = new RecordSeal(new KeyRing([{ id: 'k', key: randomBytes(32) }], 'k'));
    try {
      for (const record of [outsider.seal('grant', 'victim', planted), testRecordSeal().seal('fence', 'victim', planted)]) {
        writeFileSync(victim, record);
        await expect(admitVictimId('globex')).rejects.toMatchObject({ code: 'INTEGRITY' });
      }
    } finally {
      renameSync(`${victim}.kept`, victim);
    }
    await expect(admitVictimId('acme')).resolves.toMatchObject({ ten: 'acme' });
  });

  it("an epoch entry planted, or another context's genuine one copied, revokes nothing: INTEGRITY, audited", async () => {
    const folder = join(tier, 'epochs', hashed('victim'));
    mkdirSync(folder, { recursive: true, mode: 0o700 });
    const planted = join(folder, String(2 ** 53));
    writeFileSync(planted, '', { mode: 0o600 });
    try {
      await expect(admitVictimId('acme')).rejects.toMatchObject({ code: 'INTEGRITY' });
      expect(forgedLines('victim').some((line) => line.action === 'open-epoch')).toBe(true);
    } finally {
      rmSync(planted);
    }
    await fx.capabilities.revoke('donor', 2 ** 53); // a genuine epoch record of another context
    const donor = join(tier, 'epochs', hashed('donor'));
    const [entry] = readdirSync(donor).filter((name) => !name.startsWith('.'));
    copyFileSync(join(donor, entry!), join(folder, entry!));
    try {
      await expect(admitVictimId('acme')).rejects.toMatchObject({ code: 'INTEGRITY' });
    } finally {
      rmSync(join(folder, entry!));
    }
    await expect(admitVictimId('acme')).resolves.toMatchObject({ ten: 'acme' });
  });

  it('a fence planted over a holder: it is not taken for fenced, the record is INTEGRITY', async () => {
    const dir = join(scratch, 'fences');
    const fences = await HolderFences.open(await posixStore(dir), '', 'queue@worker-a', testRecordSeal());
    await fences.claim('planner', 1, 1);
    const planted = join(dir, hashed('planner'), `9.1.${'0123456789abcdef'}`);
    writeFileSync(planted, 'queue@worker-mallory', { mode: 0o600 });
    await expect(fences.stillHolder('planner')).rejects.toMatchObject({ code: 'INTEGRITY' });
    rmSync(planted);
    await expect(fences.stillHolder('planner')).resolves.toBe(true);
  });

  it("a tenant id file rewritten to name another tenant: the tenant's id is not moved, the record is INTEGRITY", async () => {
    const dir = join(scratch, 'tenants');
    const acme = await (await TenantRegistry.open(await posixStore(dir), '', testRecordSeal())).idOf('acme');
    expect(acme).toBe(preferredTenantId('acme'));
    const file = join(dir, acme.toString(16).padStart(8, '0'));
    copyFileSync(file, `${file}.kept`);
    writeFileSync(file, 'globex');
    await expect((await TenantRegistry.open(await posixStore(dir), '', testRecordSeal())).idOf('acme')).rejects.toMatchObject({
      code: 'INTEGRITY',
    });
    renameSync(`${file}.kept`, file);
    expect(await (await TenantRegistry.open(await posixStore(dir), '', testRecordSeal())).idOf('acme')).toBe(acme);
  });
});
