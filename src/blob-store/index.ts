// Public entry of the storage seam: the interface, its refusal, and the two backends.
export { isPreconditionFailed, PreconditionFailed } from './blob-errors';
export type { BlobCondition, BlobHead, BlobRead, BlobStore, BlobVersion, ByteRange } from './blob-store';
export { openBlobStore, type S3Settings } from './open-blob-store';
export { PosixBlobStore } from './posix/posix-blob-store';
export { S3BlobStore, type S3BlobStoreOptions } from './s3/s3-blob-store';
