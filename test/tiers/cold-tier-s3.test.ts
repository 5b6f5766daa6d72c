// The cold tier on a real S3 server (SeaweedFS, built by npm run setup:tests): two workers, each with its
// own private scratch directory and pool, opening the bucket as the worker does (tier URL, endpoint, path
// style; credentials only from the AWS SDK's chain), share nothing else. One suspends a context to the
// bucket, the other resumes it byte for byte, from segments big enough to go up as multipart uploads and
// come down as ranged GETs; the first, fenced off, has its late manifest refused by the bucket itself.
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { isPreconditionFailed } from '../../src/blob-store/blob-errors';
import type { BlobStore } from '../../src/blob-store/blob-store';
import { openSharedStore, tierLocationOf } from '../../src/plugin/tier-location';
import { segmentKey } from '../../src/tiers/cold/cold-blob-keys';
import { expectSameBytes, tokenBytes } from '../fabric/implementations';
import { startSeaweedfs, type SeaweedfsServer } from '../support/seaweedfs';
import { credentialsInEnvironment } from '../support/sdk-chain-credentials';
import { expectCode } from './cold/helpers';
import { openSharedTierWorker, type SharedTierWorker } from './fixtures/shared-tier';

/** 16 KiB a token, 16 tokens a block: 256 KiB blocks, 64 to a segment, so a full segment is past the 16 MiB multipart threshold. */
const SHAPE = { layers: 4, kvHeads: 8, headDim: 128, dtypeBytes: 2 };
const BYTES_PER_TOKEN = 2 * 4 * 8 * 128 * 2;
const TOKENS = 64 * 16 + 5 * 16 + 3;
const key = Buffer.alloc(32, 7);

let server: SeaweedfsServer;
let scratch: string;
let restoreEnvironment: () => void = () => undefined;
const closing: { close(): Promise<void> }[] = [];

beforeAll(async () => {
  server = await startSeaweedfs();
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-cold-s3-'));
  restoreEnvironment = credentialsInEnvironment(server);
}, 120_000);
afterAll(async () => {
  for (const open of closing.splice(0).reverse()) await open.close();
  restoreEnvironment();
  await server?.close();
  rmSync(scratch, { recursive: true, force: true });
});

/** A worker of its own: a private scratch directory and the bucket under `prefix`, opened from the tier URL. */
async function openWorker(name: string, prefix: string): Promise<{ worker: SharedTierWorker; store: BlobStore; scratchDir: string }> {
  const scratchDir = join(scratch, name);
  mkdirSync(scratchDir, { mode: 0o700 });
  const location = tierLocationOf({ tierUrl: `s3://${server.bucket}/${prefix}`, scratchDir });
  expect(location.directory).toBeUndefined();
  const store = await openSharedStore(location, { endpoint: server.endpoint, forcePathStyle: true });
  closing.push(store);
  const worker = await openSharedTierWorker(store, key, { shape: SHAPE, tokensPerBlock: 16, blockCount: 96 });
  closing.push(worker);
  return { worker, store, scratchDir };
}

describe('the cold tier on S3', () => {
  it('suspends a context on one worker and resumes it on another, sharing only the bucket: the same bytes', async () => {
    const first = await openWorker('first', 'resume/');
    const second = await openWorker('second', 'resume/');
    const bytes = tokenBytes(TOKENS, 3, BYTES_PER_TOKEN);
    first.worker.memory.create('agent', 5);
    await first.worker.memory.append('agent', bytes);
    await first.worker.memory.demote('agent', 'disk');
    const version = first.worker.memory.durableVersion('agent');

    // The full segment went up in parts (a multipart ETag ends in -<parts>), the short one whole.
    const segments = await first.worker.cold.listSegments();
    expect(segments).toHaveLength(2);
    const etags = await Promise.all(segments.map(async (id) => (await first.store.head(segmentKey(id)))!.version));
    expect(etags.filter((etag) => /-\d+"?$/.test(etag))).toHaveLength(1);

    await second.worker.memory.recover('agent', { expectedTenant: 5, minVersion: version });
    await second.worker.memory.promote('agent');
    expectSameBytes(await second.worker.memory.read('agent', 0, TOKENS), bytes);
    // Nothing went to either worker's scratch directory: the bucket is all they share, and all they use.
    for (const dir of [first.scratchDir, second.scratchDir]) expect(readdirSync(dir)).toEqual([]);

    // The second goes on; the first, fenced off but unaware, writes its own copy: the bucket refuses it.
    await second.worker.memory.append('agent', tokenBytes(16, 4, BYTES_PER_TOKEN));
    await second.worker.memory.spill('agent');
    await first.worker.memory.promote('agent');
    await first.worker.memory.append('agent', tokenBytes(1, 9, BYTES_PER_TOKEN));
    await expectCode(first.worker.memory.spill('agent'), 'STALE_HANDLE', /adopted by another worker/);
    expect(first.worker.memory.has('agent')).toBe(false);
    const kept = await second.worker.cold.readManifest('agent', { expectedTenant: 5 });
    expect(kept.tokens).toBe(TOKENS + 16);
    expect(kept.version).toBe(version + 1);

    await second.worker.memory.release('agent');
    expect(await second.worker.cold.listManifests()).toEqual([]);
  }, 120_000);

  it("refuses a stale writer's manifest (If-Match on a version replaced since) and a second first manifest", async () => {
    const { worker: writer } = await openWorker('writer', 'stale/');
    const { worker: taker } = await openWorker('taker', 'stale/');
    writer.memory.create('ctx', 1);
    await writer.memory.append('ctx', tokenBytes(20, 1, BYTES_PER_TOKEN));
    await writer.memory.spill('ctx');
    const manifest = await writer.cold.readManifest('ctx');
    await expect(taker.cold.writeManifest({ ...manifest, version: 1 }, { replaces: 'none' })).rejects.toSatisfy(isPreconditionFailed);
    await taker.cold.writeManifest({ ...manifest, version: 2 }, { replaces: 1 });
    const late = await expectCode(
      writer.cold.writeManifest({ ...manifest, version: 2, createdAt: 'late' }, { replaces: 1 }),
      'STALE_HANDLE',
    );
    expect(isPreconditionFailed(late)).toBe(true);
    expect((await taker.cold.readManifest('ctx')).createdAt).toBe(manifest.createdAt);
  }, 60_000);
});
