// A blob store from a URL, as the worker's --tier-url gives it: file:///path for a directory (what
// --tier-dir names), s3://bucket/prefix for a bucket, with the S3 server's endpoint, region and path
// style beside it. INVALID_ARGUMENT for any other URL.
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { FabricError } from '../fabric/errors';
import type { BlobStore } from './blob-store';
import { PosixBlobStore } from './posix/posix-blob-store';
import { S3BlobStore, type S3BlobStoreOptions } from './s3/s3-blob-store';

/** What an s3:// URL leaves out: the rest of S3BlobStoreOptions. */
export type S3Settings = Omit<S3BlobStoreOptions, 'bucket' | 'prefix'>;

export async function openBlobStore(url: string, s3: S3Settings = {}): Promise<BlobStore> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `a tier URL is file:///path or s3://bucket/prefix, got ${JSON.stringify(String(url).slice(0, 200))}`,
    );
  }
  if (parsed.protocol === 'file:') return PosixBlobStore.open(path.resolve(fileURLToPath(parsed)));
  if (parsed.protocol === 's3:') {
    if (parsed.username || parsed.password || parsed.search || parsed.hash) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        'an s3:// tier URL names a bucket and a prefix only: credentials come from the AWS SDK chain',
      );
    }
    const prefix = parsed.pathname.replace(/^\/+/, '');
    return new S3BlobStore({ ...s3, bucket: parsed.hostname, prefix: prefix === '' || prefix.endsWith('/') ? prefix : `${prefix}/` });
  }
  throw new FabricError('INVALID_ARGUMENT', `a tier URL is file:///path or s3://bucket/prefix, got a ${parsed.protocol} URL`);
}
