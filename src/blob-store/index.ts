// Public entry of the storage seam: the interface, its refusal, the two backends, and puts in pieces.
export { isPreconditionFailed, PreconditionFailed } from './blob-errors';
export type { BlobCondition, BlobHead, BlobRead, BlobStore, BlobVersion, ByteRange } from './blob-store';
export { openBlobStore, type S3Settings } from './open-blob-store';
export { PosixBlobStore } from './posix/posix-blob-store';
export { S3BlobStore, type S3BlobStoreOptions } from './s3/s3-blob-store';
export { bufferedPut, hasStreamedPuts, type StreamedPut, type StreamedPuts } from './streamed-put';
