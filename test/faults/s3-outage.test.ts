// The S3 tier when the store fails under it, on a real S3 server (SeaweedFS): the server stopped in the
// middle of a suspend (after its segment, before its manifest) and in the middle of a resume (after the
// manifest, at the first segment read), and a writer killed with SIGKILL during a big segment's multipart
// upload. Each call gets a typed UNAVAILABLE (the activity layer's retries take it from there); once the
// server is back nothing is lost or half-visible: the context resumes byte for byte on another worker, no
// manifest names a missing segment, and the orphan sweep removes the orphaned segments and aborts the
// incomplete upload.
import { spawn } from 'node:child_process';
import { join } from 'node:path';

import { ListMultipartUploadsCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { BlobStore } from '../../src/blob-store/blob-store';
import { SEGMENTS_PREFIX } from '../../src/tiers/cold/cold-blob-keys';
import { expectSameBytes, tokenBytes } from '../fabric/implementations';
import { startSeaweedfs, type SeaweedfsServer } from '../support/seaweedfs';
import { expectCode } from '../tiers/cold/helpers';
import { openSharedTierWorker, type SharedTierWorker } from '../tiers/fixtures/shared-tier';
import { BIG_SHAPE, BYTES_PER_BIG_TOKEN, FIRST_TOKENS } from './fixtures/multipart-shape';

const key = Buffer.alloc(32, 11);
let server: SeaweedfsServer;
/** Closed after the file, last opened first: the server goes last. */
const closing: { close(): Promise<void> }[] = [];

beforeAll(async () => {
  server = await startSeaweedfs();
  closing.push(server);
}, 120_000);
afterAll(async () => {
  for (const open of closing.splice(0).reverse()) await open.close();
});

type Call = 'put' | 'get' | 'getInto' | 'getStartInto' | 'head' | 'list' | 'delete';
const CALLS: readonly string[] = ['put', 'get', 'getInto', 'getStartInto', 'head', 'list', 'delete'];

/** The bucket under `prefix`; once armed, the server is stopped just before the first call `when` picks: a fault at a chosen step. */
function storeFailingAt(prefix: string): { store: BlobStore; arm(when: (call: Call, key: string) => boolean): void; tripped(): boolean } {
  const store = server.store({ prefix });
  closing.push(store);
  let armed: ((call: Call, key: string) => boolean) | undefined;
  let tripped = false;
  const failing = new Proxy(store, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver);
      if (typeof value !== 'function' || !CALLS.includes(String(name))) return value;
      return async (...args: [string, ...unknown[]]) => {
        if (armed?.(name as Call, args[0])) {
          armed = undefined;
          tripped = true;
          await server.stop();
        }
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: failing, arm: (when) => void (armed = when), tripped: () => tripped };
}

async function workerOn(store: BlobStore, options: Parameters<typeof openSharedTierWorker>[2] = {}): Promise<SharedTierWorker> {
  const worker = await openSharedTierWorker(store, key, { tokensPerBlock: 4, ...options });
  closing.push(worker);
  return worker;
}

async function plainWorker(prefix: string, options: Parameters<typeof openSharedTierWorker>[2] = {}): Promise<SharedTierWorker> {
  const store = server.store({ prefix });
  closing.push(store);
  return workerOn(store, options);
}

/** Every manifest's pages name segments that are in the bucket: nothing half-visible. */
async function expectNoMissingSegment(worker: SharedTierWorker): Promise<void> {
  const present = new Set(await worker.cold.listSegments());
  for (const contextId of await worker.cold.listManifests()) {
    const manifest = await worker.cold.readManifest(contextId);
    expect(manifest.pages.filter((page) => !present.has(page.segmentId))).toEqual([]);
  }
}

describe('the S3 store down mid-operation', () => {
  it('a suspend whose manifest finds the server down: UNAVAILABLE, the last version kept whole, then the retry lands', async () => {
    const failing = storeFailingAt('suspend/');
    const first = await workerOn(failing.store);
    const before = tokenBytes(40, 1);
    const grown = Buffer.concat([before, tokenBytes(24, 2)]);
    first.memory.create('ctx', 4);
    await first.memory.append('ctx', before);
    await first.memory.spill('ctx');
    await first.memory.append('ctx', grown.subarray(before.byteLength));
    // After the new segment is stored, before the manifest that would name it.
    failing.arm((call, blobKey) => call === 'put' && !blobKey.startsWith(SEGMENTS_PREFIX));
    try {
      await expectCode(first.memory.demote('ctx', 'disk'), 'UNAVAILABLE', /object store could not be reached/);
      expect(failing.tripped()).toBe(true);
      // The new segment is stored and the pages point at it (disk only); the manifest naming it is not.
      expect(first.memory.residency('ctx')).toBe('disk');
    } finally {
      // Only a tripped fault stopped it: starting a running server would hide why the fault never came.
      if (failing.tripped()) await server.start();
    }
    expectSameBytes(await first.memory.read('ctx', 0, 64), grown);
    // Nothing half-visible there: the bucket's manifest is the last one written, naming segments all present.
    const second = await plainWorker('suspend/');
    await expectNoMissingSegment(second);
    expect((await second.cold.readManifest('ctx', { expectedTenant: 4 })).tokens).toBe(40);

    await first.memory.demote('ctx', 'disk');
    await second.memory.recover('ctx', { expectedTenant: 4, minVersion: first.memory.durableVersion('ctx') });
    await second.memory.promote('ctx');
    expectSameBytes(await second.memory.read('ctx', 0, 64), grown);
    await second.memory.sweepOrphanSegments(0); // the failed try's segment, if the writer could not delete it
    expect(await second.cold.orphanSegments()).toEqual([]);
    await expectNoMissingSegment(second);
  }, 120_000);

  it('a resume whose segment read finds the server down: UNAVAILABLE, still on disk, then the retry reads the same bytes', async () => {
    const writer = await plainWorker('resume/');
    const bytes = tokenBytes(56, 3);
    writer.memory.create('ctx', 4);
    await writer.memory.append('ctx', bytes);
    await writer.memory.demote('ctx', 'disk');
    const failing = storeFailingAt('resume/');
    const reader = await workerOn(failing.store);
    await reader.memory.recover('ctx', { expectedTenant: 4, minVersion: writer.memory.durableVersion('ctx') });
    // After the manifest and the segment's head, at its first ranged GET.
    failing.arm(
      (call, blobKey) => (call === 'get' || call === 'getInto' || call === 'getStartInto') && blobKey.startsWith(SEGMENTS_PREFIX),
    );
    try {
      await expectCode(reader.memory.promote('ctx'), 'UNAVAILABLE', /object store could not be reached/);
      expect(failing.tripped()).toBe(true);
      expect(reader.memory.residency('ctx')).toBe('disk');
    } finally {
      // Only a tripped fault stopped it: starting a running server would hide why the fault never came.
      if (failing.tripped()) await server.start();
    }
    await reader.memory.promote('ctx');
    expectSameBytes(await reader.memory.read('ctx', 0, 56), bytes);
    await expectNoMissingSegment(reader);
  }, 120_000);
});

describe('a writer killed during a multipart upload', () => {
  it('leaves every manifest whole; the sweep deletes any orphaned segment and aborts the upload', async () => {
    const prefix = 'killed/';
    const writer = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'fixtures', 'multipart-writer.ts')], {
      env: {
        ...process.env,
        // Credentials as a worker gets them: the AWS SDK's chain, here its environment variables.
        AWS_ACCESS_KEY_ID: server.credentials.accessKeyId,
        AWS_SECRET_ACCESS_KEY: server.credentials.secretAccessKey,
        KVF_BUCKET: server.bucket,
        KVF_PREFIX: prefix,
        KVF_ENDPOINT: server.endpoint,
        KVF_KEY: key.toString('hex'),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<string | number | null>((resolve) => writer.once('exit', (code, signal) => resolve(signal ?? code)));
    let output = '';
    await new Promise<void>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes('part uploaded') && output.includes('spilled')) resolve();
      };
      writer.stdout.on('data', onData);
      writer.stderr.on('data', onData);
      void exited.then((how) => reject(new Error(`the writer exited (${how}) before a part was uploaded:\n${output}`)));
    });
    writer.kill('SIGKILL');
    expect(await exited).toBe('SIGKILL');

    const admin = new S3Client({ endpoint: server.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: server.credentials });
    const uploads = async () =>
      (await admin.send(new ListMultipartUploadsCommand({ Bucket: server.bucket, Prefix: `${prefix}${SEGMENTS_PREFIX}` }))).Uploads ?? [];
    try {
      expect(await uploads()).toHaveLength(1);
      const heir = await plainWorker(prefix, { shape: BIG_SHAPE, tokensPerBlock: 16, blockCount: 96 });
      await expectNoMissingSegment(heir);
      expect(await heir.cold.listManifests()).toEqual(['big']);
      const manifest = await heir.cold.readManifest('big', { expectedTenant: 3 });
      expect(manifest.tokens).toBe(FIRST_TOKENS);

      // A sweep with the worker's minimum age keeps the young upload (it could be a live writer's); age 0 takes it.
      await heir.memory.sweepOrphanSegments(3_600_000);
      expect(await uploads()).toHaveLength(1);
      await heir.memory.recover('big', { expectedTenant: 3, minVersion: manifest.version });
      const orphans = await heir.cold.orphanSegments(); // segments the killed spill completed, if any
      expect(await heir.memory.sweepOrphanSegments(0)).toBe(orphans.length + 1);
      expect(await uploads()).toEqual([]);
      expect(await heir.cold.orphanSegments()).toEqual([]);
      await heir.memory.promote('big');
      expectSameBytes(await heir.memory.read('big', 0, FIRST_TOKENS), tokenBytes(FIRST_TOKENS, 1, BYTES_PER_BIG_TOKEN));
    } finally {
      admin.destroy();
    }
  }, 120_000);
});
