// The S3 backend on a real S3 server (SeaweedFS, built by npm run setup:tests): the shared contract, then
// what only S3 has: multipart uploads for big blobs (with their condition on completion), parallel ranged
// reads, refused credentials, and a server that goes down (UNAVAILABLE, then served again).
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
