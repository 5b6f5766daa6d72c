// One S3 multipart upload fed in pieces (streamed-put.ts): pieces are copied into part buffers of the
// store's part size, and a part goes up as soon as it is full, at most `parallelParts` at once, while the
// writer is still producing later ones; a write that fills a part waits until its upload has started, so
// memory stays bounded when the store is slower than the writer. Parts still partly written at complete()
// (a segment's first, whose header comes last) go up then. The condition rides on
// CompleteMultipartUpload, so the blob appears whole and only if it holds (create-only: If-None-Match: *).
// Any failure aborts the upload once the parts in flight have settled, so no part lands after the abort.
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  HeadObjectCommand,
  type S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';

import { FabricError } from '../../fabric/errors';
import type { BlobVersion } from '../blob-store';
import { checkPiece, type StreamedPut } from '../streamed-put';
import { etagOfParts } from './etag';
import { attemptsOf, s3Error, statusOf } from './s3-errors';

export interface MultipartTarget {
  readonly client: S3Client;
  readonly bucket: string;
  /** The object's key in the bucket (the store's prefix included) and the blob key, for messages. */
  readonly objectKey: string;
  readonly key: string;
  readonly uploadId: string;
  readonly size: number;
  readonly partBytes: number;
  readonly parallelParts: number;
  readonly conditions: { readonly IfNoneMatch?: string; readonly IfMatch?: string };
  /** For messages: "writing blob k (s3://b/p)". */
  readonly what: string;
  /**
   * Whether a piece that is exactly one part may be sent without a copy: only when the caller keeps its
   * bytes unchanged until complete() settles (S3BlobStore.put, whose bytes are the caller's whole blob).
   */
  readonly borrows?: boolean;
}

interface Part {
  bytes: Uint8Array;
  filled: number;
}

export class MultipartWriter implements StreamedPut {
  private readonly parts: Array<Part | undefined>;
  private readonly sent: boolean[];
  private readonly etags: string[];
  private readonly uploads: Array<Promise<void>> = [];
  /** Writers waiting for a free upload slot. */
  private readonly waiting: Array<() => void> = [];
  /** Full-size part buffers whose upload is done, reused for later parts. */
  private readonly spare: Buffer[] = [];
  private active = 0;
  private failure: { error: unknown } | undefined;
  private state: 'open' | 'completing' | 'done' | 'aborted' = 'open';
  private aborting: Promise<void> | undefined;

  constructor(private readonly target: MultipartTarget) {
    const count = Math.ceil(target.size / target.partBytes);
    this.parts = new Array(count);
    this.sent = new Array(count).fill(false);
    this.etags = new Array(count);
  }

  async write(bytes: Uint8Array, offset: number): Promise<void> {
    const { key, size, partBytes } = this.target;
    this.checkOpen();
    checkPiece(key, size, bytes, offset);
    const starts: Array<Promise<void>> = [];
    const end = offset + bytes.byteLength;
    for (let index = Math.floor(offset / partBytes); index * partBytes < end; index++) {
      if (this.sent[index]) {
        // Parts already started settle on their own; their failure is the upload's, reported by complete().
        for (const start of starts) start.catch(() => undefined);
        throw new FabricError('INVALID_STATE', `blob ${key}: part ${index + 1} written again after it was sent`);
      }
      const partStart = index * partBytes;
      const partSize = this.partSize(index);
      const from = Math.max(offset, partStart);
      const to = Math.min(end, partStart + partSize);
      if (this.target.borrows && from === partStart && to - from === partSize && this.parts[index] === undefined) {
        this.parts[index] = { bytes: bytes.subarray(from - offset, to - offset), filled: partSize };
      } else {
        const part = (this.parts[index] ??= { bytes: this.buffer(partSize), filled: 0 });
        part.bytes.set(bytes.subarray(from - offset, to - offset), from - partStart);
        part.filled += to - from;
      }
      if (this.parts[index]!.filled >= partSize) starts.push(this.send(index));
    }
    await Promise.all(starts);
  }

  async complete(): Promise<BlobVersion> {
    return this.finish().catch((err: unknown) => {
      throw s3Error(err, this.target.key, this.target.what);
    });
  }

  /** complete() with S3's own error, for S3BlobStore.put, which retries a whole upload that raced (409). */
  async finish(): Promise<BlobVersion> {
    const { client, bucket, objectKey, key, uploadId, conditions } = this.target;
    this.checkOpen();
    this.state = 'completing';
    try {
      // Parts never filled to their end: a header's padding, or bytes never written (zeros).
      for (let index = 0; index < this.parts.length; index++) {
        if (this.sent[index]) continue;
        this.parts[index] ??= { bytes: this.buffer(this.partSize(index)), filled: 0 };
        await this.send(index);
      }
      await Promise.all(this.uploads);
      if (this.failure !== undefined) throw this.failure.error;
      const Parts = this.etags.map((ETag, i) => ({ ETag, PartNumber: i + 1 }));
      let version: string | undefined;
      try {
        version = (
          await client.send(
            new CompleteMultipartUploadCommand({
              Bucket: bucket,
              Key: objectKey,
              UploadId: uploadId,
              MultipartUpload: { Parts },
              ...conditions,
            }),
          )
        ).ETag;
      } catch (err) {
        // A completion that landed but whose answer was lost is refused on the SDK's retry (412, or 404 for
        // an upload already completed): the object there is then this upload's, which its ETag shows.
        if ((attemptsOf(err) ?? 1) < 2 || ![404, 412].includes(statusOf(err) ?? 0)) throw err;
        const head = await client.send(new HeadObjectCommand({ Bucket: bucket, Key: objectKey })).catch(() => undefined);
        if (head?.ETag !== etagOfParts(this.etags)) throw err;
        version = head.ETag;
      }
      this.state = 'done';
      if (version === undefined || version === '') throw new FabricError('UNAVAILABLE', `blob ${key}: the object store returned no ETag`);
      return version;
    } catch (err) {
      await this.abort();
      throw err;
    }
  }

  abort(): Promise<void> {
    if (this.state === 'done') return Promise.resolve();
    this.state = 'aborted';
    this.aborting ??= (async () => {
      for (const wake of this.waiting.splice(0)) wake();
      // Every part in flight settled first: a part stored after the abort would outlive it.
      await Promise.all(this.uploads);
      const { client, bucket, objectKey, uploadId } = this.target;
      // Best effort: parts left by a failed abort are the orphan sweep's (incomplete-uploads.ts).
      await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: objectKey, UploadId: uploadId })).catch(() => undefined);
      this.parts.fill(undefined);
      this.spare.length = 0;
    })();
    return this.aborting;
  }

  private checkOpen(): void {
    if (this.failure !== undefined) throw s3Error(this.failure.error, this.target.key, this.target.what);
    if (this.state !== 'open') throw new FabricError('INVALID_STATE', `blob ${this.target.key}: the upload is ${this.state}`);
  }

  private partSize(index: number): number {
    return Math.min(this.target.partBytes, this.target.size - index * this.target.partBytes);
  }

  private buffer(size: number): Uint8Array {
    const spare = size === this.target.partBytes ? this.spare.pop() : undefined;
    return spare?.fill(0) ?? Buffer.alloc(size);
  }

  /** Uploads part `index` once a slot is free; resolves when its upload has started. */
  private async send(index: number): Promise<void> {
    this.sent[index] = true;
    while (this.active >= this.target.parallelParts && this.state !== 'aborted') {
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    }
    this.checkFailed();
    this.active++;
    const part = this.parts[index]!;
    this.parts[index] = undefined;
    const { client, bucket, objectKey, uploadId } = this.target;
    const upload = client
      .send(
        new UploadPartCommand({
          Bucket: bucket,
          Key: objectKey,
          UploadId: uploadId,
          PartNumber: index + 1,
          Body: part.bytes,
          ContentLength: part.bytes.byteLength,
        }),
      )
      .then((answer) => {
        if (answer.ETag === undefined || answer.ETag === '') throw new FabricError('UNAVAILABLE', 'the object store returned no part ETag');
        this.etags[index] = answer.ETag;
        if (Buffer.isBuffer(part.bytes) && part.bytes.byteLength === this.target.partBytes && !this.target.borrows)
          this.spare.push(part.bytes);
      })
      .catch((error: unknown) => {
        this.failure ??= { error };
      })
      .finally(() => {
        this.active--;
        this.waiting.shift()?.();
      });
    this.uploads.push(upload);
  }

  private checkFailed(): void {
    if (this.failure !== undefined) throw s3Error(this.failure.error, this.target.key, this.target.what);
    if (this.state === 'aborted') throw new FabricError('INVALID_STATE', `blob ${this.target.key}: the upload was aborted`);
  }
}
