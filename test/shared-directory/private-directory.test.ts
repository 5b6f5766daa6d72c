// Who may list the shared tier directory's folders (they name agent ids): each opener creates its folder
// 0700 (records 0600), tightens an existing one that others can only list, and refuses one that others
// can write or that another user owns, leaving it exactly as it was. Real directories; the cases that
// need another user (chown, listing as that user) run where the tests run as root.
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { AuditLog } from '../../src/security/audit-log';
import { EpochStore } from '../../src/shared-directory/epochs';
import { GrantStore } from '../../src/shared-directory/grant-store';
import { HolderFences } from '../../src/shared-directory/holder-fences';
import { TenantRegistry } from '../../src/shared-directory/tenant-registry';
import { ColdStore, KeyRing } from '../../src/tiers/cold';
import { openPrivateDirectory } from '../../src/blob-store/posix/private-directory';
import { posixStore, testRecordSeal } from './fixtures/test-records';

const ROOT = process.getuid!() === 0;
const STRANGER = 12345;
const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-private-dirs-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const modeOf = (path: string) => statSync(path).mode & 0o7777;

/** Each folder of a tier directory that names agent ids, and the real code a worker opens it with. */
const OPENERS: { folder: string; open: (tierDir: string) => Promise<unknown> }[] = [
  { folder: 'grants', open: async (tier) => GrantStore.open(await posixStore(tier), 'grants/', testRecordSeal()) },
  { folder: 'epochs', open: async (tier) => EpochStore.open(await posixStore(tier), 'epochs/', testRecordSeal()) },
  { folder: 'fences', open: async (tier) => HolderFences.open(await posixStore(tier), 'fences/', 'worker-a', testRecordSeal()) },
  { folder: 'tenants', open: async (tier) => TenantRegistry.open(await posixStore(tier), 'tenants/', testRecordSeal()) },
  {
    folder: 'cold/manifests',
    open: async (tier) =>
      (
        await ColdStore.open({
          directory: join(tier, 'cold'),
          keyRing: new KeyRing([{ id: 'k', key: Buffer.alloc(32, 7) }], 'k'),
          cryptoThreads: 1,
        })
      ).close(),
  },
  {
    folder: 'cold/segments',
    open: async (tier) =>
      (
        await ColdStore.open({
          directory: join(tier, 'cold'),
          keyRing: new KeyRing([{ id: 'k', key: Buffer.alloc(32, 7) }], 'k'),
          cryptoThreads: 1,
        })
      ).close(),
  },
  {
    folder: 'audit',
    open: (tier) =>
      new AuditLog(join(tier, 'audit', 'denials.jsonl'), 'worker-a').denied({
        agent: 'planner',
        tenant: 'acme',
        context: 'planner',
        action: 'append',
        reason: 'revoked',
      }),
  },
];

let tiers = 0;
function tierDir(): string {
  return join(scratch, `tier-${tiers++}`);
}

describe('private folders of the shared directory', () => {
  it.each(OPENERS)('$folder: created 0700 (the tier directory too, when missing)', async ({ folder, open }) => {
    const tier = tierDir();
    await open(tier);
    expect(modeOf(join(tier, folder))).toBe(0o700);
    expect(modeOf(tier)).toBe(0o700);
  });

  it.each(OPENERS)('$folder: an existing 0755 one is tightened to 0700, its records kept', async ({ folder, open }) => {
    const tier = tierDir();
    mkdirSync(join(tier, folder), { recursive: true, mode: 0o755 });
    chmodSync(join(tier, folder), 0o755);
    const before = readdirSync(join(tier, folder));
    await open(tier);
    expect(modeOf(join(tier, folder))).toBe(0o700);
    expect(readdirSync(join(tier, folder))).toEqual(expect.arrayContaining(before));
  });

  it.each(OPENERS.flatMap((opener) => [0o777, 0o775, 0o1777, 0o757].map((mode) => ({ ...opener, mode, octal: mode.toString(8) }))))(
    '$folder: an existing $octal one is refused PERMISSION_DENIED and left exactly as it was',
    async ({ folder, open, mode }) => {
      const tier = tierDir();
      const path = join(tier, folder);
      mkdirSync(path, { recursive: true });
      writeFileSync(join(path, 'planted'), 'someone else was here');
      chmodSync(path, mode);
      await expect(open(tier)).rejects.toMatchObject({ code: 'PERMISSION_DENIED', message: expect.stringContaining(`chmod 700 ${path}`) });
      expect(modeOf(path)).toBe(mode);
      expect(readdirSync(path)).toEqual(['planted']);
    },
  );

  it.skipIf(!ROOT).each(OPENERS)(
    '$folder: one another user owns is refused PERMISSION_DENIED, even 0700, and left as it was',
    async ({ folder, open }) => {
      const tier = tierDir();
      const path = join(tier, folder);
      mkdirSync(path, { recursive: true, mode: 0o700 });
      chownSync(path, STRANGER, STRANGER);
      await expect(open(tier)).rejects.toMatchObject({
        code: 'PERMISSION_DENIED',
        message: expect.stringContaining(`belongs to user ${STRANGER}`),
      });
      expect(statSync(path)).toMatchObject({ uid: STRANGER, gid: STRANGER });
      expect(modeOf(path)).toBe(0o700);
      expect(readdirSync(path)).toEqual([]);
    },
  );

  it('refuses a file where a folder belongs with UNAVAILABLE (unusable storage, as for the cold tier)', async () => {
    const tier = tierDir();
    mkdirSync(tier);
    writeFileSync(join(tier, 'grants'), '');
    await expect(GrantStore.open(await posixStore(tier), 'grants/', testRecordSeal())).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      message: expect.stringContaining('EEXIST'),
    });
    await expect(openPrivateDirectory(join(tier, 'grants', 'below'), 'a folder')).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      message: expect.stringContaining('ENOTDIR'),
    });
  });

  it.skipIf(!ROOT)('another user can list a 0755 grants folder before a worker opens it, and not after', async () => {
    const tier = tierDir();
    mkdirSync(join(tier, 'grants'), { recursive: true });
    chmodSync(scratch, 0o755); // the way down is open to everyone: only the folder's own mode protects it
    chmodSync(tier, 0o755);
    chmodSync(join(tier, 'grants'), 0o755);
    writeFileSync(join(tier, 'grants', 'planner.grant.json'), '{}');
    const listAsStranger = () => spawnSync('ls', [join(tier, 'grants')], { uid: STRANGER, gid: STRANGER, encoding: 'utf8' });
    try {
      expect(listAsStranger()).toMatchObject({ status: 0, stdout: 'planner.grant.json\n' });
      await GrantStore.open(await posixStore(tier), 'grants/', testRecordSeal());
      const refused = listAsStranger();
      expect(refused.status).not.toBe(0);
      expect(refused.stderr).toContain('Permission denied');
    } finally {
      chmodSync(scratch, 0o700);
    }
  });
});
