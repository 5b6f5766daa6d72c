// Tier URLs: file:///path opens the POSIX backend, s3://bucket/prefix the S3 one (without connecting), and
// anything else, credentials in the URL included, is INVALID_ARGUMENT before any store is touched.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { afterAll, describe, expect, it } from 'vitest';

import { openBlobStore } from '../../src/blob-store/open-blob-store';
import { PosixBlobStore } from '../../src/blob-store/posix/posix-blob-store';
import { S3BlobStore } from '../../src/blob-store/s3/s3-blob-store';

const root = mkdtempSync(path.join(os.tmpdir(), 'kvfabric-tier-url-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('openBlobStore', () => {
  it('opens a directory from a file:// URL', async () => {
    const store = await openBlobStore(pathToFileURL(path.join(root, 'tier')).href);
    expect(store).toBeInstanceOf(PosixBlobStore);
    expect(store.location).toBe(`file://${path.join(root, 'tier')}`);
    await store.put('k', Buffer.from('v'));
    expect((await store.get('k'))?.bytes.toString()).toBe('v');
  });

  it('opens a bucket and prefix from an s3:// URL, with the endpoint and path style beside it', async () => {
    const store = await openBlobStore('s3://kv-bucket/team/tier', { endpoint: 'http://127.0.0.1:1', forcePathStyle: true });
    expect(store).toBeInstanceOf(S3BlobStore);
    expect(store.location).toBe('s3://kv-bucket/team/tier/');
    await store.close();
    expect((await openBlobStore('s3://kv-bucket')).location).toBe('s3://kv-bucket/');
  });

  it('refuses other URLs, credentials in the URL and bad buckets or options as INVALID_ARGUMENT', async () => {
    for (const url of ['', 'tier', 'http://host/x', 's3://user:secret@bucket/p', 's3://bucket/p?x=1', 's3://B_ad/p', 's3://bucket/a b']) {
      await expect(openBlobStore(url), url).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    await expect(openBlobStore('s3://bucket/p', { partBytes: 1024 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(openBlobStore('s3://bucket/p', { parallelParts: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    const err = await openBlobStore('s3://user:secret@bucket/p').catch((e: Error) => e);
    expect((err as Error).message).not.toContain('secret');
  });
});
