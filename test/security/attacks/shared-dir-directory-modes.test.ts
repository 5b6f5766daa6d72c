// Attack class: reading agent ids off the shared tier directory (issue 25, item 10, first bullet). Its
// folders were created 0755, so anyone on the machine could list grants, epochs, fences, manifests and
// the audit, each named by or holding agent ids. Now every folder a worker opens is 0700 and every record
// 0600; an existing folder that others can only list is tightened, and one that others can write (or that
// another user owns) is refused PERMISSION_DENIED and left exactly as it was: a planted grant or a deleted
// epoch entry in it must not be trusted. Opening a folder is no call of any agent, so nothing is audited
// there; the denial a worker audits below is written 0600 into a 0700 folder.
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { AllocateRequest } from '../../../src/activities';
import { emptyDigest } from '../../../src/agent-memory/context-digest';
import { EpochStore } from '../../../src/shared-directory/epochs';
import { GrantStore } from '../../../src/shared-directory/grant-store';
import { HolderFences } from '../../../src/shared-directory/holder-fences';
import { TenantRegistry } from '../../../src/shared-directory/tenant-registry';
import { AuditLog } from '../../../src/security/audit-log';
import { ColdStore } from '../../../src/tiers/cold';
import { MODELS } from '../../../src/engines/models';
import { posixStore, TEST_KEY_RING, testRecordSeal } from '../../shared-directory/fixtures/test-records';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { activitiesOf, as, denials, workflowOf } from './activity-fixture';

const ROOT = process.getuid!() === 0;
const STRANGER = 12345;
let scratch: string;
let tier: string;
let fx: MemoryFixture;

const allocation = (agentId: string, capability: string): AllocateRequest => ({
  agentId,
  tenant: 'acme',
  capability,
  operationId: `${agentId}:0`,
  shape: MODELS.tiny!.shape,
  tokensPerBlock: MODELS.tiny!.tokensPerBlock,
  checkpoint: true,
});

/** Every folder and file under `dir`, with its permission bits. */
function walk(dir: string): { path: string; directory: boolean; mode: number }[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    const here = { path, directory: entry.isDirectory(), mode: statSync(path).mode & 0o7777 };
    return entry.isDirectory() ? [here, ...walk(path)] : [here];
  });
}

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-attack-modes-'));
  tier = join(scratch, 'tier');
  // A worker at work: two agents, a turn written to the cold tier, a release, a refused call, a fence.
  fx = await openMemory(tier);
  const activities = activitiesOf(fx);
  const planner = fx.token('planner');
  await as(workflowOf('planner'), () => activities.placement.allocate(allocation('planner', planner)));
  await as(workflowOf('planner'), () =>
    activities.holder.turn({
      agentId: 'planner',
      tenant: 'acme',
      capability: planner,
      operationId: 'planner:1',
      turn: 0,
      tokens: 16,
      before: emptyDigest(),
      checkpoint: true,
    }),
  );
  const critic = fx.token('critic');
  await as(workflowOf('critic'), () => activities.placement.allocate(allocation('critic', critic)));
  await as(workflowOf('critic'), () =>
    activities.holder.release({ agentId: 'critic', tenant: 'acme', capability: critic, operationId: 'critic:1' }),
  );
  await expect(fx.memory.admit(fx.call('planner', 'acme', 'turn', fx.token('planner', 'globex')))).rejects.toMatchObject({
    code: 'PERMISSION_DENIED',
  });
  await (await HolderFences.open(await posixStore(tier), 'fences/', 'queue@worker-b', testRecordSeal())).claim('planner', 1, 1);
});
afterAll(async () => {
  await fx?.close();
  rmSync(scratch, { recursive: true, force: true });
});

describe('attack: listing agent ids in the shared tier directory', () => {
  it("a worker's tier directory holds only 0700 folders and 0600 files", () => {
    const entries = walk(tier);
    const folders = entries.filter((entry) => entry.directory).map((entry) => relative(tier, entry.path));
    expect(folders).toEqual(expect.arrayContaining(['grants', 'epochs', 'fences', 'tenants', 'cold/manifests', 'cold/segments', 'audit']));
    expect(denials(fx).length).toBeGreaterThan(0);
    expect(
      entries
        .filter((entry) => entry.mode !== (entry.directory ? 0o700 : 0o600))
        .map((entry) => `${relative(tier, entry.path)} 0${entry.mode.toString(8)}`),
    ).toEqual([]);
  });

  it.skipIf(!ROOT)('another user cannot list any of its folders, even where the way down is open to everyone', () => {
    chmodSync(scratch, 0o755);
    chmodSync(tier, 0o755);
    chmodSync(join(tier, 'cold'), 0o755);
    try {
      for (const folder of ['grants', 'epochs', 'fences', 'tenants', 'cold/manifests', 'cold/segments', 'audit']) {
        const listed = spawnSync('ls', [join(tier, folder)], { uid: STRANGER, gid: STRANGER, encoding: 'utf8' });
        expect({ folder, status: listed.status, stdout: listed.stdout }).toEqual({ folder, status: 2, stdout: '' });
        expect(listed.stderr).toContain('Permission denied');
      }
    } finally {
      chmodSync(scratch, 0o700);
    }
  });

  /** The folder a worker opens, and how it opens it (src/plugin/worker-memory.ts does the same). */
  const OPENERS: { folder: string; open: (tierDir: string) => Promise<unknown> }[] = [
    { folder: 'grants', open: async (t) => GrantStore.open(await posixStore(t), 'grants/', testRecordSeal()) },
    { folder: 'epochs', open: async (t) => EpochStore.open(await posixStore(t), 'epochs/', testRecordSeal()) },
    { folder: 'fences', open: async (t) => HolderFences.open(await posixStore(t), 'fences/', 'queue@worker-b', testRecordSeal()) },
    { folder: 'tenants', open: async (t) => TenantRegistry.open(await posixStore(t), 'tenants/', testRecordSeal()) },
    {
      folder: 'cold/manifests',
      open: async (t) =>
        (
          await ColdStore.open({
            directory: join(t, 'cold'),
            keyRing: TEST_KEY_RING,
            cryptoThreads: 1,
          })
        ).close(),
    },
    {
      folder: 'audit',
      open: (t) =>
        new AuditLog(join(t, 'audit', 'denials.jsonl'), 'w').denied({
          agent: 'planner',
          tenant: 'acme',
          context: 'planner',
          action: 'turn',
          reason: 'revoked',
        }),
    },
  ];

  it.each(OPENERS)(
    'a pre-existing 0777 $folder folder with a record planted in it: refused PERMISSION_DENIED, left exactly as it was',
    async ({ folder, open }) => {
      const planted = join(scratch, `planted-${folder.replace('/', '-')}`);
      const path = join(planted, folder);
      mkdirSync(path, { recursive: true });
      writeFileSync(join(path, 'victim.record'), '{"contextId":"victim","tenant":"evil","agentId":"victim"}');
      chmodSync(path, 0o777);
      await expect(open(planted)).rejects.toMatchObject({
        code: 'PERMISSION_DENIED',
        message: expect.stringContaining('other users can add, replace or delete its records'),
      });
      expect(statSync(path).mode & 0o7777).toBe(0o777);
      expect(readdirSync(path)).toEqual(['victim.record']);
      expect(readFileSync(join(path, 'victim.record'), 'utf8')).toContain('"tenant":"evil"');
    },
  );

  it('a pre-existing 0755 grants folder is tightened to 0700 and its grants still count', async () => {
    const older = join(scratch, 'older');
    mkdirSync(join(older, 'grants'), { recursive: true, mode: 0o755 });
    chmodSync(join(older, 'grants'), 0o755);
    await (await GrantStore.open(await posixStore(older), 'grants/', testRecordSeal())).put({
      contextId: 'planner',
      tenant: 'acme',
      agentId: 'planner',
    });
    chmodSync(join(older, 'grants'), 0o755); // as a worker before this change left it
    const grants = await GrantStore.open(await posixStore(older), 'grants/', testRecordSeal());
    expect(statSync(join(older, 'grants')).mode & 0o777).toBe(0o700);
    expect(await grants.get('planner')).toEqual({ contextId: 'planner', tenant: 'acme', agentId: 'planner' });
  });
});
