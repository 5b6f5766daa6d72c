// Attack class (holds): a stale holder's late write. A worker paused past its lease (a long GC pause, a
// network partition) passes its fence check just before another worker adopts its context, then goes on:
// it writes the context's next version, or releases the context, deleting its manifest. Neither may land:
// the adopter writes the adopted version again as the next one (TieredMemory.reseal), so the stale write
// is refused STALE_HANDLE and its copy dropped; the stale release deletes only the version it holds
// (deleteManifest's version), so the adopter's manifest stays. The adopter then resumes both contexts
// byte for byte and writes on. On the POSIX blob store and on a real S3 server (SeaweedFS).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { BlobStore } from '../../../src/blob-store/blob-store';
import { PosixBlobStore } from '../../../src/blob-store/posix/posix-blob-store';
import { expectSameBytes, tokenBytes } from '../../fabric/implementations';
import { startSeaweedfs, type SeaweedfsServer } from '../../support/seaweedfs';
import { expectCode } from '../../tiers/cold/helpers';
import { openSharedTierWorker, type SharedTierWorker } from '../../tiers/fixtures/shared-tier';

const key = Buffer.alloc(32, 5);
const FIRST = tokenBytes(12, 1);
const LATE = tokenBytes(4, 2);

let server: SeaweedfsServer;
let scratch: string;
const closing: { close(): Promise<void> }[] = [];

beforeAll(async () => {
  server = await startSeaweedfs();
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-late-write-'));
}, 120_000);
afterAll(async () => {
  for (const open of closing.splice(0).reverse()) await open.close();
  await server?.close();
  rmSync(scratch, { recursive: true, force: true });
});

const backends: Array<{ name: string; open: () => Promise<BlobStore> }> = [
  { name: 'the POSIX blob store', open: () => PosixBlobStore.open(join(scratch, 'blobs')) },
  { name: 'S3 (SeaweedFS)', open: async () => server.store({ prefix: 'late-write/' }) },
];

describe.each(backends)('a stale holder on $name', ({ open }) => {
  it('cannot land a late write or a late release once another worker adopted its contexts', async () => {
    const store = await open();
    closing.push(store);
    const worker = async (): Promise<SharedTierWorker> => {
      const opened = await openSharedTierWorker(store, key);
      closing.push(opened);
      return opened;
    };
    // The holder's fence check passes (its default: no fences), as it did just before the adoption.
    const stale = await worker();
    for (const id of ['written', 'released']) {
      stale.memory.create(id, 1);
      await stale.memory.append(id, FIRST);
      await stale.memory.spill(id);
    }
    expect(stale.memory.durableVersion('written')).toBe(1);

    const adopter = await worker();
    for (const id of ['written', 'released']) {
      await adopter.memory.recover(id, { expectedTenant: 1, minVersion: 1 });
      await adopter.memory.reseal(id);
    }

    // The late write: refused by the store, the stale copy dropped.
    await stale.memory.append('written', LATE);
    await expectCode(stale.memory.spill('written'), 'STALE_HANDLE');
    expect(stale.memory.has('written')).toBe(false);
    // The late release: its own copy goes, the adopter's manifest stays.
    await stale.memory.release('released');
    expect(await adopter.cold.hasManifest('released')).toBe(true);
    for (const id of ['written', 'released']) expect(adopter.memory.durableVersion(id)).toBe(2);

    // The adopter's copies are the durable ones: a third worker resumes them at the adopter's version,
    // with none of the stale holder's tokens, and the adopter writes on.
    const next = await worker();
    for (const id of ['written', 'released']) {
      await next.memory.recover(id, { expectedTenant: 1, minVersion: 2 });
      await next.memory.promote(id);
      expect(next.memory.contextStats(id).tokens).toBe(12);
      expectSameBytes(await next.memory.read(id, 0, 12), FIRST);
    }
    await adopter.memory.append('written', LATE);
    await adopter.memory.spill('written');
    expect(adopter.memory.durableVersion('written')).toBe(3);
  }, 120_000);
});
