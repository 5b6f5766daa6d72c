// Attack class (holds): the cold tier's bucket in hostile hands. An attacker who can write the bucket (a
// leaked upload credential, a misconfigured policy) but holds no master key swaps a segment or a manifest
// between two contexts or two tenants, or puts back an older manifest (rollback), then waits for a worker
// to resume the victim from the bucket. The worker must refuse with INTEGRITY before any page of the
// victim is readable, and resume it once the objects are whole again. Runs on a real S3 server (SeaweedFS).
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import type { BlobStore } from '../../../src/blob-store/blob-store';
import type { S3BlobStore } from '../../../src/blob-store/s3/s3-blob-store';
import { contextKeyPath, MANIFEST_LOG_PREFIX, manifestKey, segmentKey } from '../../../src/tiers/cold/cold-blob-keys';
import { expectSameBytes, tokenBytes } from '../../fabric/implementations';
import { startSeaweedfs, type SeaweedfsServer } from '../../support/seaweedfs';
import { expectCode } from '../../tiers/cold/helpers';
import { openSharedTierWorker, type SharedTierWorker } from '../../tiers/fixtures/shared-tier';

const PREFIX = 'tier/';
const key = Buffer.alloc(32, 9);
/** Context -> tenant: two contexts of the victim's tenant, one of another. */
const CONTEXTS = { victim: 1, neighbour: 1, intruder: 2 } as const;
type ContextName = keyof typeof CONTEXTS;
const bytesOf = (name: ContextName) => tokenBytes(name === 'victim' ? 23 : 17, name.length);

let server: SeaweedfsServer;
/** The workers' store, and the attacker's: the same bucket and prefix, no key. */
let store: S3BlobStore;
let attacker: S3BlobStore;
const closing: { close(): Promise<void> }[] = [];
/** The bucket as the holder left it: every object's bytes. */
let pristine: Map<string, Buffer>;
/** The victim's manifest of version 1, replaced by version 2 since. */
let olderManifest: Buffer;
let victimVersion: number;

async function openWorker(on: BlobStore = store): Promise<SharedTierWorker> {
  const worker = await openSharedTierWorker(on, key);
  closing.push(worker);
  return worker;
}

async function objects(): Promise<Map<string, Buffer>> {
  const all = new Map<string, Buffer>();
  for (const head of await attacker.list('')) all.set(head.key, (await attacker.get(head.key))!.bytes);
  return all;
}

async function segmentsOf(worker: SharedTierWorker, name: ContextName): Promise<string[]> {
  const manifest = await worker.cold.readManifest(name);
  return [...new Set(manifest.pages.map((page) => page.segmentId))];
}

/** A fresh worker resumes the victim as its workflow would: adopt at the version it knows, then read. */
async function resumeVictim(): Promise<{ worker: SharedTierWorker; read: Promise<Uint8Array> }> {
  const worker = await openWorker();
  const read = (async () => {
    await worker.memory.recover('victim', { expectedTenant: CONTEXTS.victim, minVersion: victimVersion });
    await worker.memory.promote('victim');
    return worker.memory.read('victim', 0, 23);
  })();
  return { worker, read };
}

beforeAll(async () => {
  server = await startSeaweedfs();
  store = server.store({ prefix: PREFIX });
  attacker = server.store({ prefix: PREFIX });
  closing.push(store, attacker);
  const holder = await openWorker();
  for (const [name, tenant] of Object.entries(CONTEXTS) as [ContextName, number][]) {
    holder.memory.create(name, tenant);
    await holder.memory.append(name, name === 'victim' ? bytesOf(name).subarray(0, 8 * 16) : bytesOf(name));
    await holder.memory.spill(name);
  }
  olderManifest = (await attacker.get(manifestKey('victim')))!.bytes;
  await holder.memory.append('victim', bytesOf('victim').subarray(8 * 16));
  await holder.memory.demote('victim', 'disk');
  victimVersion = holder.memory.durableVersion('victim');
  expect(victimVersion).toBe(2);
  // The holder dies here: what is left is the bucket.
  pristine = await objects();
}, 120_000);
afterAll(async () => {
  for (const open of closing.splice(0).reverse()) await open.close();
  await server?.close();
});
beforeEach(async () => {
  for (const [objectKey, bytes] of pristine) await attacker.put(objectKey, bytes);
});

describe('an attacker who can write the bucket but holds no key', () => {
  it('(baseline) a fresh worker resumes the victim from the untouched bucket', async () => {
    const { read } = await resumeVictim();
    expectSameBytes(await read, bytesOf('victim'));
  });

  for (const other of ['neighbour', 'intruder'] as const) {
    it(`swaps the ${other}'s segment in for the victim's: INTEGRITY, no page`, async () => {
      const reader = await openWorker();
      const [victimSegment] = await segmentsOf(reader, 'victim');
      const [otherSegment] = await segmentsOf(reader, other);
      await attacker.put(segmentKey(victimSegment!), (await attacker.get(segmentKey(otherSegment!)))!.bytes);
      const { worker, read } = await resumeVictim();
      await expectCode(read, 'INTEGRITY', /swapped|renamed|replaced|authentication/);
      // The adopted context has no page in memory: only its disk copies, which do not verify.
      expect(worker.memory.has('victim') ? worker.memory.residency('victim') : 'none').not.toBe('device');
    });

    it(`swaps the ${other}'s manifest in for the victim's: INTEGRITY, nothing adopted`, async () => {
      await attacker.put(manifestKey('victim'), pristine.get(manifestKey(other))!);
      const { worker, read } = await resumeVictim();
      await expectCode(read, 'INTEGRITY', /failed authentication/);
      expect(worker.memory.has('victim')).toBe(false);
    });
  }

  it('puts back the older manifest version: INTEGRITY (rollback), nothing adopted', async () => {
    // Version 1 as it was: its base, without the manifest-log record that made version 2.
    await attacker.put(manifestKey('victim'), olderManifest);
    const records = await attacker.list(`${MANIFEST_LOG_PREFIX}${contextKeyPath('victim')}/`);
    expect(records.length).toBeGreaterThan(0);
    for (const record of records) await attacker.delete(record.key);
    const { worker, read } = await resumeVictim();
    await expectCode(read, 'INTEGRITY', /older than the expected 2 \(stale or replayed\)/);
    expect(worker.memory.has('victim')).toBe(false);
  });

  it('(afterwards) the whole objects put back, the victim resumes byte for byte', async () => {
    const { read } = await resumeVictim();
    expectSameBytes(await read, bytesOf('victim'));
  });
});
