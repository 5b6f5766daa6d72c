// The S3 backend on a real S3 server (SeaweedFS, built by npm run setup:tests): the shared contract, then
// what only S3 has: multipart uploads for big blobs (with their condition on completion), puts streamed in
// pieces whose parts go up before completion, parallel ranged reads, refused credentials, and a server
// that goes down (UNAVAILABLE, then served again).
import { ListMultipartUploadsCommand, ListPartsCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { isPreconditionFailed } from '../../src/blob-store/blob-errors';
import { etagOf } from '../../src/blob-store/s3/etag';
import { MIN_PART_BYTES } from '../../src/blob-store/s3/s3-blob-store';
import { startSeaweedfs, type SeaweedfsServer } from '../support/seaweedfs';
import { blobStoreContract } from './blob-store-contract';

let server: SeaweedfsServer;
let stores = 0;
beforeAll(async () => {
  server = await startSeaweedfs();
}, 120_000);
afterAll(async () => {
  await server?.close();
});

// Each suite's store under a prefix of its own: empty, like the POSIX backend's fresh directory.
blobStoreContract('S3 (SeaweedFS)', { open: async () => server.store({ prefix: `contract-${++stores}/` }), propertyRuns: 15 });

describe('S3 blob store', () => {
  it('writes a big blob in parallel parts, reads it back in parallel ranges, and keeps its condition', async () => {
    const store = server.store({ prefix: 'big/', partBytes: MIN_PART_BYTES, multipartThresholdBytes: MIN_PART_BYTES, parallelParts: 3 });
    const bytes = Buffer.alloc(2 * MIN_PART_BYTES + 12345);
    for (let i = 0; i < bytes.length; i += 4096) bytes.writeUInt32LE(i, i);
    const version = await store.put('segment', bytes, { ifNoneMatch: '*' });
    // The ETag a lost answer's retry is recognised by (etag.ts): the server's own, for parts and whole.
    expect(version).toBe(etagOf(bytes, MIN_PART_BYTES));
    expect(await store.put('small', bytes.subarray(0, 1000))).toBe(etagOf(bytes.subarray(0, 1000)));
    const read = await store.get('segment');
    expect(read?.size).toBe(bytes.length);
    expect(read?.version).toBe(version);
    expect(read?.bytes.equals(bytes)).toBe(true);
    const across = await store.get('segment', { offset: MIN_PART_BYTES - 10, length: 20 });
    expect(across?.bytes.equals(bytes.subarray(MIN_PART_BYTES - 10, MIN_PART_BYTES + 10))).toBe(true);
    await expect(store.put('segment', bytes, { ifNoneMatch: '*' })).rejects.toSatisfy(isPreconditionFailed);
    const replaced = Buffer.from(bytes);
    replaced[0] = 255;
    await expect(store.put('segment', replaced, { ifMatch: '"0000"' })).rejects.toSatisfy(isPreconditionFailed);
    const v2 = await store.put('segment', replaced, { ifMatch: version });
    expect((await store.get('segment'))?.bytes[0]).toBe(255);
    expect((await store.head('segment'))?.version).toBe(v2);
    await store.close();
  });

  it('streams a put in pieces: full parts go up before completion, the blob appears whole at completion, create-only', async () => {
    const admin = new S3Client({ endpoint: server.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: server.credentials });
    const uploads = async () =>
      (await admin.send(new ListMultipartUploadsCommand({ Bucket: server.bucket, Prefix: 'streamed/' }))).Uploads ?? [];
    const store = server.store({
      prefix: 'streamed/',
      partBytes: MIN_PART_BYTES,
      multipartThresholdBytes: MIN_PART_BYTES,
      parallelParts: 2,
    });
    try {
      const size = 3 * MIN_PART_BYTES + 12345;
      const expected = Buffer.alloc(size);
      for (let i = 4096; i < size; i += 4096) expected.writeUInt32LE(i, i);
      expected.fill(9, 0, 100);
      const upload = await store.startPut('segment', size, { ifNoneMatch: '*' });
      // As a segment's writer does: blocks out of order, the header (and its unwritten padding) last.
      for (const [from, to] of [
        [2 * MIN_PART_BYTES, size],
        [MIN_PART_BYTES + 4096, 2 * MIN_PART_BYTES],
        [4096, MIN_PART_BYTES + 4096],
      ]) {
        await upload.write(expected.subarray(from!, to!), from!);
      }
      const [pending] = await uploads();
      expect(pending?.Key).toBe('streamed/segment');
      // Parts 2 to 4 are full and go up now; part 1 waits for its header.
      for (let tries = 0; ; tries++) {
        const listed = await admin.send(new ListPartsCommand({ Bucket: server.bucket, Key: pending!.Key, UploadId: pending!.UploadId }));
        const numbers = (listed.Parts ?? []).map((part) => part.PartNumber).sort();
        if (numbers.length === 3) {
          expect(numbers).toEqual([2, 3, 4]);
          break;
        }
        expect(tries).toBeLessThan(200);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(await store.head('segment')).toBeUndefined();
      await upload.write(expected.subarray(0, 100), 0);
      const version = await upload.complete();
      expect(version).toBe(etagOf(expected, MIN_PART_BYTES));
      expect((await store.get('segment'))?.bytes.equals(expected)).toBe(true);
      expect(await uploads()).toEqual([]);

      // Create-only still: a second upload of the key is refused at completion, and aborted.
      const second = await store.startPut('segment', size, { ifNoneMatch: '*' });
      await second.write(Buffer.alloc(size, 1), 0);
      await expect(second.complete()).rejects.toSatisfy(isPreconditionFailed);
      expect(await uploads()).toEqual([]);
      expect((await store.get('segment'))?.version).toBe(version);

      // Aborted: never visible, nothing left behind; a piece past the end is the writer's bug.
      const dropped = await store.startPut('dropped', size);
      await dropped.write(expected.subarray(0, 2 * MIN_PART_BYTES), 0);
      await expect(dropped.write(Buffer.alloc(10), size - 5)).rejects.toMatchObject({ code: 'INVALID_STATE' });
      await dropped.abort();
      await expect(dropped.write(Buffer.alloc(10), 0)).rejects.toMatchObject({ code: 'INVALID_STATE' });
      expect(await store.head('dropped')).toBeUndefined();
      expect(await uploads()).toEqual([]);

      // Below the multipart threshold: assembled and put once, under the same condition.
      const small = await store.startPut('small', 1000, { ifNoneMatch: '*' });
      await small.write(expected.subarray(0, 1000), 0);
      expect(await small.complete()).toBe(etagOf(expected.subarray(0, 1000)));
      await expect(store.startPut('bad key!', 10)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(store.startPut('k', -1)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    } finally {
      admin.destroy();
      await store.close();
    }
  });

  it('refuses wrong credentials as PERMISSION_DENIED, naming no secret', async () => {
    const store = server.store({ credentials: { accessKeyId: server.credentials.accessKeyId, secretAccessKey: 'wrong-secret-value' } });
    const err = (await store.put('k', Buffer.from('x')).catch((e: unknown) => e)) as Error & { code?: string };
    expect(err.code).toBe('PERMISSION_DENIED');
    expect(err.message).not.toContain('wrong-secret-value');
    expect(err.message).not.toContain(server.credentials.secretAccessKey);
    await store.close();
  });

  it('answers UNAVAILABLE while the server is down, and serves the same blobs once it is back', async () => {
    const store = server.store({ prefix: 'down/', maxAttempts: 1, requestTimeoutMs: 2_000 });
    const version = await store.put('kept', Buffer.from('before'));
    await server.stop();
    try {
      for (const call of [() => store.get('kept'), () => store.put('new', Buffer.from('x'), { ifNoneMatch: '*' }), () => store.list('')]) {
        await expect(call()).rejects.toMatchObject({ code: 'UNAVAILABLE' });
      }
    } finally {
      await server.start();
      await store.close();
    }
    // Back: a store with the default timeout and retries (the one above gives up within 2 s, for the
    // outage; a server just restarted on a loaded machine may take longer for its first request).
    const back = server.store({ prefix: 'down/' });
    const read = await back.get('kept');
    expect(read?.bytes.toString()).toBe('before');
    expect(read?.version).toBe(version);
    expect(await back.head('new')).toBeUndefined();
    await back.close();
  }, 120_000);
});
