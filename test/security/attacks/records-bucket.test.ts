// Attack class: the records that decide access kept in a bucket (issue 41, item 4). A bucket has no owner
// who alone can write it, as the tier directory's folders have: whoever holds write access to it (a
// leaked key, a too-wide policy, a compromised neighbour) can put, copy and delete any object, but holds
// none of the workers' master keys. Each record is sealed for its kind, its context and (for an epoch or
// fence entry) its value (src/shared-directory/record-seal.ts), so a grant planted under a fresh agent id,
// grants swapped between two agents or two tenants, and an epoch entry copied from another context or
// moved to another value are INTEGRITY, audited; a deleted grant leaves the context to nobody (its owner
// finds no context, another tenant that takes the freed id reads no page of it); a deleted epoch entry
// is INTEGRITY on every worker that saw it (src/shared-directory/rising-records.ts), and on any worker
// when the call carries the epoch the agent's workflow recorded (its allocation's, then its last
// renewal's): an agent started again under a released one's id admits none of the old agent's tokens
// either. The same attacks run
// on the POSIX directory and on a real S3 server (SeaweedFS), through a store of the attacker's own.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { BlobStore } from '../../../src/blob-store/blob-store';
import { PosixBlobStore } from '../../../src/blob-store/posix/posix-blob-store';
import { RecordSeal } from '../../../src/shared-directory/record-seal';
import { KeyRing } from '../../../src/tiers/cold';
import { startSeaweedfs, type SeaweedfsServer } from '../../support/seaweedfs';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { denials, startAgent } from './activity-fixture';

const hashed = (contextId: string) => createHash('sha256').update(contextId).digest('hex').slice(0, 40);
const grantKey = (contextId: string) => `grants/${hashed(contextId)}.grant.json`;
const epochFolder = (contextId: string) => `epochs/${hashed(contextId)}/`;

let scratch: string;
let server: SeaweedfsServer;
beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-attack-records-bucket-'));
  server = await startSeaweedfs();
}, 120_000);
afterAll(async () => {
  await server?.close();
  rmSync(scratch, { recursive: true, force: true });
});

/** Where a worker keeps its records, and a store of the same place for the attacker. */
interface Backend {
  name: string;
  /** The workers' store and the attacker's, over one place; `tier` is the workers' scratch directory. */
  open(tier: string): Promise<{ workers: () => Promise<BlobStore>; attacker: BlobStore }>;
}

const BACKENDS: Backend[] = [
  {
    name: 'a POSIX directory',
    open: async (tier) => ({ workers: () => PosixBlobStore.open(tier), attacker: await PosixBlobStore.open(tier) }),
  },
  {
    name: 'an S3 bucket (SeaweedFS)',
    open: async (tier) => {
      const prefix = `${tier.split('/').pop()}/`;
      return { workers: async () => server.store({ prefix }), attacker: server.store({ prefix }) };
    },
  },
];

let tiers = 0;

describe.each(BACKENDS)('attack: records in $name written by someone without the keys', (backend) => {
  let tier: string;
  let fx: MemoryFixture;
  let attacker: BlobStore;
  let workers: () => Promise<BlobStore>;
  const opened: BlobStore[] = [];
  const fixtures: MemoryFixture[] = [];

  /** A worker on the shared cold tier and records: the first one, or another one on another machine. */
  async function worker(): Promise<MemoryFixture> {
    const records = await workers();
    opened.push(records);
    const memory = await openMemory(tier, { records });
    fixtures.push(memory);
    return memory;
  }

  const admit = (memory: MemoryFixture, agentId: string, tenant: string, token = memory.token(agentId, tenant)) =>
    memory.memory.admit(memory.call(agentId, tenant, 'turn', token));
  const forgedLines = (context: string) => denials(fx).filter((line) => line.reason === 'forged-record' && line.context === context);

  /** Runs `attack`, then puts back every key it names as it was. */
  async function undone(keys: string[], attack: () => Promise<void>): Promise<void> {
    const kept = await Promise.all(keys.map((key) => attacker.get(key)));
    try {
      await attack();
    } finally {
      for (const [i, key] of keys.entries()) {
        const was = kept[i];
        if (was === undefined) await attacker.delete(key);
        else await attacker.put(key, was.bytes);
      }
    }
  }

  beforeAll(async () => {
    tier = join(scratch, `tier-${tiers++}`);
    ({ workers, attacker } = await backend.open(tier));
    fx = await worker();
    await startAgent(fx, 'victim', 'acme');
    await startAgent(fx, 'critic', 'acme');
    await startAgent(fx, 'intruder', 'globex');
  }, 60_000);
  afterAll(async () => {
    for (const memory of fixtures) await memory.close();
    await Promise.all([...opened, attacker].map((store) => store?.close()));
  });

  it('a grant planted under a fresh agent id, plain or sealed under a key the workers lack: INTEGRITY, no context made', async () => {
    const grant = JSON.stringify({ contextId: 'newcomer', tenant: 'globex', agentId: 'newcomer' });
    const outsider = new RecordSeal(new KeyRing([{ id: 'k', key: randomBytes(32) }], 'k'));
    for (const planted of [Buffer.from(grant), outsider.seal('grant', 'newcomer', grant)]) {
      await undone([grantKey('newcomer')], async () => {
        await attacker.put(grantKey('newcomer'), planted);
        await expect(admit(fx, 'newcomer', 'globex')).rejects.toMatchObject({ code: 'INTEGRITY' });
        await expect(fx.allocate('newcomer', fx.token('newcomer', 'acme'))).rejects.toMatchObject({ code: 'INTEGRITY' });
        await expect(fx.allocate('newcomer', fx.token('newcomer', 'globex'), { tenant: 'globex' })).rejects.toMatchObject({
          code: 'INTEGRITY',
        });
      });
    }
    expect(forgedLines('newcomer').length).toBeGreaterThanOrEqual(6);
    expect(fx.tiers.has('newcomer')).toBe(false);
  });

  it('the genuine grants of two agents of one tenant, or of two tenants, swapped: INTEGRITY for all of them', async () => {
    for (const [a, b] of [
      [
        ['victim', 'acme'],
        ['critic', 'acme'],
      ],
      [
        ['victim', 'acme'],
        ['intruder', 'globex'],
      ],
    ] as const) {
      await undone([grantKey(a[0]), grantKey(b[0])], async () => {
        const [first, second] = [await attacker.get(grantKey(a[0])), await attacker.get(grantKey(b[0]))];
        await attacker.put(grantKey(a[0]), second!.bytes);
        await attacker.put(grantKey(b[0]), first!.bytes);
        for (const [agent, tenant] of [a, b, [a[0], b[1]], [b[0], a[1]]]) {
          await expect(admit(fx, agent, tenant), `${agent} of ${tenant}`).rejects.toMatchObject({ code: 'INTEGRITY' });
        }
      });
    }
    expect(forgedLines('victim').some((line) => line.action === 'open-grant')).toBe(true);
    await expect(admit(fx, 'victim', 'acme')).resolves.toMatchObject({ ten: 'acme' });
    await expect(admit(fx, 'victim', 'globex')).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
  });

  it('an epoch entry copied from another context, or moved to another value: INTEGRITY, it revokes and admits nothing', async () => {
    await fx.capabilities.revoke('donor', 2 ** 53); // a genuine entry of another context
    const [donor] = await attacker.list(epochFolder('donor'));
    const copied = `${epochFolder('victim')}${donor!.key.split('/').pop()}`;
    await undone([copied], async () => {
      await attacker.put(copied, (await attacker.get(donor!.key))!.bytes);
      await expect(admit(await worker(), 'victim', 'acme')).rejects.toMatchObject({ code: 'INTEGRITY' });
    });
    expect(forgedLines('victim').some((line) => line.action === 'open-epoch')).toBe(true);
    // The bystander's own genuine entry 20, put under 2^53: not a revocation to 2^53, nor a way back to 20.
    await fx.capabilities.revoke('bystander', 20);
    const moved = `${epochFolder('bystander')}${2 ** 53}`;
    await undone([moved], async () => {
      await attacker.put(moved, (await attacker.get(`${epochFolder('bystander')}20`))!.bytes);
      await expect(admit(await worker(), 'bystander', 'acme', fx.token('bystander', 'acme', { epoch: 10 }))).rejects.toMatchObject({
        code: 'INTEGRITY',
      });
    });
    await expect(admit(fx, 'victim', 'acme')).resolves.toMatchObject({ ten: 'acme' });
  });

  it('an epoch entry deleted after it revoked a token: the worker that read it refuses that token (INTEGRITY), never admits it', async () => {
    // Epochs past the one its allocation raised (its start token's, the time it was minted).
    const [low, high] = [Date.now() + 1_000_010, Date.now() + 1_000_020];
    const old = fx.token('critic', 'acme', { epoch: low });
    await fx.capabilities.revoke('critic', high);
    await expect(admit(fx, 'critic', 'acme', old)).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    await undone([`${epochFolder('critic')}${high}`], async () => {
      await attacker.delete(`${epochFolder('critic')}${high}`);
      await expect(admit(fx, 'critic', 'acme', old)).rejects.toMatchObject({ code: 'INTEGRITY' });
      expect(forgedLines('critic').some((line) => line.action === 'open-epoch')).toBe(true);
    });
    await expect(admit(fx, 'critic', 'acme', old)).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
  });

  it("an epoch entry deleted after a renewal raised it: a worker that never read it refuses the revoked token (INTEGRITY) given the workflow's epoch", async () => {
    const [low, high] = [Date.now() + 1_000_010, Date.now() + 1_000_020];
    const old = fx.token('intruder', 'globex', { epoch: low });
    const current = fx.token('intruder', 'globex', { epoch: high });
    await fx.capabilities.revoke('intruder', high);
    // What the agent's workflow presents after its renewal raised `high` (ContextRequest.revokedBelow).
    const fromWorkflow = (memory: MemoryFixture, token: unknown, revokedBelow: unknown) =>
      memory.memory.admit({ ...memory.call('intruder', 'globex', 'turn', token), revokedBelow: revokedBelow as number });
    await undone([`${epochFolder('intruder')}${high}`], async () => {
      await attacker.delete(`${epochFolder('intruder')}${high}`);
      // Another worker, which never listed the intruder's epochs: the store alone says 0.
      const other = await worker();
      await expect(fromWorkflow(other, old, high)).rejects.toMatchObject({
        code: 'INTEGRITY',
        message: expect.stringContaining('deleted'),
      });
      await expect(fromWorkflow(other, current, high)).rejects.toMatchObject({ code: 'INTEGRITY' });
      expect(
        denials(other).some((line) => line.reason === 'forged-record' && line.context === 'intruder' && line.action === 'open-epoch'),
      ).toBe(true);
      // A recorded epoch that is no epoch is refused as such, before the store is read.
      for (const bad of [-1, 1.5, String(high), 2 ** 60])
        await expect(fromWorkflow(other, current, bad)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    });
    // The entry back: the current token is admitted with the workflow's epoch, the revoked one refused.
    const other = await worker();
    await expect(fromWorkflow(other, current, high)).resolves.toMatchObject({ ten: 'globex', epoch: high });
    await expect(fromWorkflow(other, old, high)).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
  });

  it("an agent started again under a released one's id: the old agent's tokens open nothing, even with every epoch entry deleted", async () => {
    const first = Date.now() + 2_000_000;
    const oldToken = fx.token('reborn', 'acme', { epoch: first });
    await fx.allocate('reborn', oldToken);
    await fx.memory.release(fx.call('reborn', 'acme', 'release', oldToken));
    // The release's entry deleted: a worker that never read it would take the old token for current.
    for (const entry of await attacker.list(epochFolder('reborn'))) await attacker.delete(entry.key);
    // The id started again, on a worker that never read the deleted entry (this one would refuse: it read
    // it), with a token minted later: its allocation revokes everything minted before.
    const next = fx.token('reborn', 'acme', { epoch: first + 5_000 });
    const allocated = await (await worker()).allocate('reborn', next);
    expect(allocated.revokedBelow).toBe(first + 5_000);
    const fromWorkflow = (memory: MemoryFixture, token: unknown) =>
      memory.memory.admit({ ...memory.call('reborn', 'acme', 'turn', token), revokedBelow: allocated.revokedBelow });
    const other = await worker();
    await expect(fromWorkflow(other, oldToken)).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining('revoked'),
    });
    await expect(fromWorkflow(other, next)).resolves.toMatchObject({ epoch: first + 5_000 });
    // And that entry deleted too: INTEGRITY on a worker that never read it, never the old token admitted.
    for (const entry of await attacker.list(epochFolder('reborn'))) await attacker.delete(entry.key);
    await expect(fromWorkflow(await worker(), oldToken)).rejects.toMatchObject({ code: 'INTEGRITY' });
  });

  it('a grant deleted: its owner finds no context, and another tenant that takes the freed id reads none of its pages', async () => {
    await attacker.delete(grantKey('victim'));
    await expect(admit(fx, 'victim', 'acme')).rejects.toMatchObject({ code: 'STALE_HANDLE' });
    // Another worker, which does not hold the victim's context: the freed id is granted anew, to globex...
    const other = await worker();
    const intruder = other.token('victim', 'globex');
    await other.allocate('victim', intruder, { tenant: 'globex' });
    // ...whose adoption of the victim's pages from the cold tier is refused: the manifest is acme's.
    const recover = other.memory.recover(other.call('victim', 'globex', 'recover', intruder), { minVersion: 0, epoch: 1, attempt: 1 });
    await expect(recover).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    await expect(admit(fx, 'victim', 'acme')).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
  });
});
