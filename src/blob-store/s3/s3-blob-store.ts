// The blob store as an S3 bucket (s3://bucket/prefix), on AWS S3 or any server with S3's conditional
// writes (SeaweedFS in the tests): create-only is PutObject with If-None-Match: *, replace-only-this-
// version is PutObject with If-Match: <ETag>, and both are atomic on the server, across machines; 412 is
// the refusal. A blob above the multipart threshold goes up in parts, in parallel, and the condition rides
// on CompleteMultipartUpload, so it appears whole and only if the condition holds; a failed upload is
// aborted. startPut takes such a blob in pieces while it is produced (multipart-writer.ts). A read above
// one part is ranged GETs in parallel, each after the first pinned with If-Match to the ETag the first
// returned, so the parts are of one version. Credentials come from the SDK's default chain (environment,
// profile, instance role) unless given; nothing here logs.
import {
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  type GetObjectCommandOutput,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';

import { FabricError } from '../../fabric/errors';
import { PreconditionFailed } from '../blob-errors';
import { checkBytes, checkCondition, checkKey, checkPrefix, checkRange, isKey } from '../blob-keys';
import type { BlobCondition, BlobHead, BlobRead, BlobStore, BlobVersion, ByteRange } from '../blob-store';
import type { BlobStart, RangedReadsInto } from '../ranged-read-into';
import { bufferedPut, type StreamedPut, type StreamedPuts } from '../streamed-put';
import { copyBodyInto } from './body-into';
import { etagOf } from './etag';
import { abortIncompleteUploads, type IncompleteUploads } from './incomplete-uploads';
import { type MultipartTarget, MultipartWriter } from './multipart-writer';
import { attemptsOf, isConditionalConflict, isNotFound, s3Error, statusOf } from './s3-errors';

const MIB = 1024 * 1024;
/** S3's smallest part but the last. */
export const MIN_PART_BYTES = 5 * MIB;
/** Tries of a conditional write that S3 answered 409 (it raced another change): each is still conditional. */
const CONFLICT_TRIES = 5;

export interface S3BlobStoreOptions {
  bucket: string;
  /** Prepended to every key ("tier/" keeps the blobs under tier/); empty or ending in "/". */
  prefix?: string;
  /** Another S3 server than AWS's (http://127.0.0.1:8333). */
  endpoint?: string;
  /** Absent: the SDK's chain (AWS_REGION, the profile); us-east-1 when there is none and an endpoint is given. */
  region?: string;
  /** Bucket in the path (endpoint/bucket/key) rather than the host name: most non-AWS servers want it. */
  forcePathStyle?: boolean;
  /** Absent: the SDK's default credential chain. */
  credentials?: S3ClientConfig['credentials'];
  /** Blobs of more bytes than this go up as a multipart upload (default 16 MiB). */
  multipartThresholdBytes?: number;
  /** Bytes per uploaded part and per ranged GET (default 8 MiB; at least 5 MiB, S3's minimum part). */
  partBytes?: number;
  /** Parts moving at once, up or down (default 4). */
  parallelParts?: number;
  /** Tries of each request, the SDK's retries of 5xx and network failures included (default 3). */
  maxAttempts?: number;
  /** A request that has not answered in this long fails, UNAVAILABLE after the tries (default 30 s). */
  requestTimeoutMs?: number;
}

export class S3BlobStore implements BlobStore, IncompleteUploads, StreamedPuts, RangedReadsInto {
  readonly location: string;
  private readonly client: S3Client;
  private readonly bucket: string;
  private readonly prefix: string;
  private readonly multipartThresholdBytes: number;
  private readonly partBytes: number;
  private readonly parallelParts: number;

  constructor(options: S3BlobStoreOptions) {
    const { bucket, prefix = '', multipartThresholdBytes = 16 * MIB, partBytes = 8 * MIB, parallelParts = 4 } = options;
    if (typeof bucket !== 'string' || !/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        `an S3 bucket name is 3-63 characters of [a-z0-9.-], got ${JSON.stringify(String(bucket).slice(0, 80))}`,
      );
    }
    if (prefix !== '') checkPrefix(prefix.endsWith('/') ? prefix : `${prefix}/`);
    if (prefix !== '' && !prefix.endsWith('/'))
      throw new FabricError('INVALID_ARGUMENT', `an S3 key prefix ends with "/", got ${JSON.stringify(prefix)}`);
    if (!Number.isSafeInteger(partBytes) || partBytes < MIN_PART_BYTES) {
      throw new FabricError('INVALID_ARGUMENT', `partBytes is at least ${MIN_PART_BYTES} (S3's smallest part), got ${String(partBytes)}`);
    }
    if (!Number.isSafeInteger(multipartThresholdBytes) || multipartThresholdBytes < partBytes) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        `multipartThresholdBytes is at least partBytes (${partBytes}), got ${String(multipartThresholdBytes)}`,
      );
    }
    if (!Number.isSafeInteger(parallelParts) || parallelParts < 1 || parallelParts > 64) {
      throw new FabricError('INVALID_ARGUMENT', `parallelParts is 1-64, got ${String(parallelParts)}`);
    }
    this.bucket = bucket;
    this.prefix = prefix;
    this.multipartThresholdBytes = multipartThresholdBytes;
    this.partBytes = partBytes;
    this.parallelParts = parallelParts;
    this.location = `s3://${bucket}/${prefix}`;
    this.client = new S3Client({
      endpoint: options.endpoint,
      region: options.region ?? (options.endpoint !== undefined && !process.env.AWS_REGION ? 'us-east-1' : undefined),
      forcePathStyle: options.forcePathStyle,
      credentials: options.credentials,
      maxAttempts: options.maxAttempts ?? 3,
      requestHandler: {
        requestTimeout: options.requestTimeoutMs ?? 30_000,
        connectionTimeout: options.requestTimeoutMs ?? 30_000,
        throwOnRequestTimeout: true,
      },
      // Integrity is checked above the seam (every page has its digest); servers other than AWS vary in
      // which of the SDK's default checksum headers they accept.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    });
  }

  async put(key: string, bytes: Uint8Array, condition?: BlobCondition): Promise<BlobVersion> {
    checkKey(key);
    checkBytes(bytes);
    checkCondition(condition);
    const conditions = conditionsOf(condition);
    return this.whileConflicting(key, `writing blob ${key}`, async () => {
      try {
        if (bytes.byteLength > this.multipartThresholdBytes) return await this.putInParts(key, bytes, conditions);
        const written = await this.client.send(
          new PutObjectCommand({
            Bucket: this.bucket,
            Key: this.prefix + key,
            Body: bytes,
            ContentLength: bytes.byteLength,
            ...conditions,
          }),
        );
        return this.versionFrom(written.ETag, key);
      } catch (err) {
        // If-Match on a key that is gone (S3 answers 404): the version asked for is not there.
        if (conditions.IfMatch !== undefined && (attemptsOf(err) ?? 1) < 2 && isNotFound(err)) {
          throw new PreconditionFailed(key, `blob ${key} is gone: not at version ${conditions.IfMatch}`);
        }
        // A conditional write whose first try landed but whose answer was lost is refused on the SDK's
        // retry (412): the blob there is then this write's own, which its ETag shows (the one these bytes
        // make). A multipart upload's completion checks this itself (multipart-writer.ts).
        if (bytes.byteLength > this.multipartThresholdBytes || (attemptsOf(err) ?? 1) < 2 || statusOf(err) !== 412) throw err;
        const head = await this.head(key);
        if (head?.version !== etagOf(bytes)) throw err;
        return head.version;
      }
    });
  }

  async get(key: string, range?: ByteRange): Promise<BlobRead | undefined> {
    checkKey(key);
    checkRange(range);
    try {
      if (range !== undefined) {
        const read = await this.getRange(key, range.offset, range.length);
        if (read !== undefined && read.bytes.byteLength !== range.length) {
          throw new FabricError(
            'OUT_OF_RANGE',
            `bytes ${range.offset}-${range.offset + range.length - 1} of blob ${key}, which has ${read.size}`,
          );
        }
        return read;
      }
      // A blob replaced between its parts (If-Match refused a later part): read the new one whole.
      for (let tries = 1; ; tries++) {
        try {
          return await this.getWhole(key);
        } catch (err) {
          if (!(s3Error(err, key, '') instanceof PreconditionFailed) || tries === CONFLICT_TRIES) throw err;
        }
      }
    } catch (err) {
      throw s3Error(err, key, `reading blob ${key} (${this.location})`);
    }
  }

  /** A range streamed straight into `into` (ranged-read-into.ts): the cold tier's reads of block runs. */
  async getInto(key: string, offset: number, into: Uint8Array): Promise<BlobHead | undefined> {
    checkKey(key);
    const length = into instanceof Uint8Array ? into.byteLength : Number.NaN;
    checkRange({ offset, length });
    const what = `reading blob ${key} (${this.location})`;
    try {
      const read = await this.rangeInto(key, offset, into, what);
      if (read === undefined) return undefined;
      if (read.bytes !== length) {
        throw new FabricError('OUT_OF_RANGE', `bytes ${offset}-${offset + length - 1} of blob ${key}, which has ${read.head.size}`);
      }
      return read.head;
    } catch (err) {
      throw s3Error(err, key, what);
    }
  }

  /** The first bytes and the size in one GET, its Content-Range saying the size: no HEAD before it. */
  async getStartInto(key: string, into: Uint8Array): Promise<BlobStart | undefined> {
    checkKey(key);
    checkRange({ offset: 0, length: into instanceof Uint8Array ? into.byteLength : Number.NaN });
    const what = `reading blob ${key} (${this.location})`;
    try {
      return await this.rangeInto(key, 0, into, what);
    } catch (err) {
      // 416: an empty blob, which has no byte 0.
      if (statusOf(err) !== 416) throw s3Error(err, key, what);
      const head = await this.head(key);
      return head && { head, bytes: 0 };
    }
  }

  async head(key: string): Promise<BlobHead | undefined> {
    checkKey(key);
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }));
      return { key, size: head.ContentLength ?? 0, version: this.versionFrom(head.ETag, key) };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw s3Error(err, key, `reading blob ${key} (${this.location})`);
    }
  }

  async list(prefix: string): Promise<BlobHead[]> {
    checkPrefix(prefix);
    const heads: BlobHead[] = [];
    let token: string | undefined;
    try {
      do {
        const page = await this.client.send(
          new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix + prefix, ContinuationToken: token }),
        );
        for (const object of page.Contents ?? []) {
          const key = object.Key?.slice(this.prefix.length);
          // Objects others put in the bucket under names no key can have are not blobs of this store.
          if (key === undefined || !isKey(key)) continue;
          heads.push({ key, size: object.Size ?? 0, version: this.versionFrom(object.ETag, key) });
        }
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token !== undefined);
    } catch (err) {
      throw s3Error(err, prefix, `listing blobs under ${prefix || '/'} (${this.location})`);
    }
    return heads.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  async delete(key: string, condition?: { readonly ifMatch: BlobVersion }): Promise<boolean> {
    checkKey(key);
    if (condition !== undefined) checkCondition(condition);
    if (condition === undefined && (await this.head(key)) === undefined) return false;
    return this.whileConflicting(key, `deleting blob ${key}`, async () => {
      try {
        await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.prefix + key, IfMatch: condition?.ifMatch }));
      } catch (err) {
        // If-Match on a key that is gone: the version asked for is not there.
        if (condition !== undefined && isNotFound(err))
          throw new PreconditionFailed(key, `blob ${key} is gone: not at version ${condition.ifMatch}`);
        throw err;
      }
      return true;
    });
  }

  /**
   * A put of `size` bytes written in pieces (streamed-put.ts): above the multipart threshold a multipart
   * upload whose parts go up as they fill, with the condition on its completion; below it, assembled in
   * memory and put once.
   */
  async startPut(key: string, size: number, condition?: BlobCondition): Promise<StreamedPut> {
    checkKey(key);
    checkCondition(condition);
    if (!Number.isSafeInteger(size) || size < 0)
      throw new FabricError('INVALID_ARGUMENT', `a blob's size is an integer >= 0, got ${String(size)}`);
    if (size <= this.multipartThresholdBytes) return bufferedPut(this, key, size, condition);
    return this.startMultipart(key, size, conditionsOf(condition), false);
  }

  /** Multipart uploads under `prefix` left incomplete (incomplete-uploads.ts), aborted once at least `minAgeMs` old. */
  async abortIncompleteUploads(prefix: string, minAgeMs: number): Promise<number> {
    checkPrefix(prefix);
    return abortIncompleteUploads(this.client, this.bucket, this.prefix + prefix, minAgeMs).catch((err: unknown) => {
      throw s3Error(err, prefix, `aborting incomplete uploads under ${prefix || '/'} (${this.location})`);
    });
  }

  async close(): Promise<void> {
    this.client.destroy();
  }

  private async whileConflicting<T>(key: string, what: string, attempt: () => Promise<T>): Promise<T> {
    for (let tries = 1; ; tries++) {
      try {
        return await attempt();
      } catch (err) {
        if (isConditionalConflict(err) && tries < CONFLICT_TRIES) {
          await new Promise((resolve) => setTimeout(resolve, 10 * tries * Math.random()));
          continue;
        }
        throw s3Error(err, key, `${what} (${this.location})`);
      }
    }
  }

  private async putInParts(key: string, bytes: Uint8Array, conditions: S3Conditions): Promise<BlobVersion> {
    const upload = await this.startMultipart(key, bytes.byteLength, conditions, true);
    try {
      await upload.write(bytes, 0);
    } catch (err) {
      await upload.abort();
      throw err;
    }
    return upload.finish();
  }

  private async startMultipart(key: string, size: number, conditions: S3Conditions, borrows: boolean): Promise<MultipartWriter> {
    const objectKey = this.prefix + key;
    const what = `writing blob ${key} (${this.location})`;
    const started = await this.client
      .send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey }))
      .catch((err: unknown) => {
        throw s3Error(err, key, what);
      });
    if (started.UploadId === undefined) throw new FabricError('UNAVAILABLE', `${what}: the store started no multipart upload`);
    const { client, bucket, partBytes, parallelParts } = this;
    return new MultipartWriter({
      client,
      bucket,
      objectKey,
      key,
      uploadId: started.UploadId,
      size,
      partBytes,
      parallelParts,
      conditions,
      what,
      borrows,
    });
  }

  /** Up to `into.byteLength` bytes from `offset`, as the server clips the range to the blob; undefined when there is none. */
  private async rangeInto(key: string, offset: number, into: Uint8Array, what: string): Promise<BlobStart | undefined> {
    const answer = await this.sendRange(key, offset, into.byteLength);
    if (answer === undefined) return undefined;
    const bytes = await copyBodyInto(answer.Body, into, what);
    return { head: { key, size: sizeFrom(answer.ContentRange, offset + bytes), version: this.versionFrom(answer.ETag, key) }, bytes };
  }

  /** Bytes [offset, offset + length) or fewer at the end; undefined when there is no such key. */
  private async getRange(key: string, offset: number, length: number, ifMatch?: string): Promise<BlobRead | undefined> {
    const answer = await this.sendRange(key, offset, length, ifMatch);
    if (answer === undefined) return undefined;
    const bytes = Buffer.from((await answer.Body?.transformToByteArray()) ?? new Uint8Array(0));
    return { key, size: sizeFrom(answer.ContentRange, offset + bytes.byteLength), version: this.versionFrom(answer.ETag, key), bytes };
  }

  /** The ranged GET's answer, body unread; undefined when there is no such key. */
  private async sendRange(key: string, offset: number, length: number, ifMatch?: string): Promise<GetObjectCommandOutput | undefined> {
    try {
      return await this.client.send(
        new GetObjectCommand({
          Bucket: this.bucket,
          Key: this.prefix + key,
          Range: `bytes=${offset}-${offset + length - 1}`,
          IfMatch: ifMatch,
        }),
      );
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  private async getWhole(key: string): Promise<BlobRead | undefined> {
    let first: BlobRead | undefined;
    try {
      first = await this.getRange(key, 0, this.partBytes);
    } catch (err) {
      // 416 on the first part: an empty blob, which has no byte 0.
      if (statusOf(err) !== 416) throw err;
      const head = await this.head(key);
      return head && { ...head, bytes: Buffer.alloc(0) };
    }
    if (first === undefined || first.size <= first.bytes.byteLength) return first;
    const count = Math.ceil(first.size / this.partBytes);
    const parts: Buffer[] = new Array(count);
    parts[0] = first.bytes;
    await this.inParallel(count - 1, async (i) => {
      const offset = (i + 1) * this.partBytes;
      const part = await this.getRange(key, offset, Math.min(this.partBytes, first.size - offset), first.version);
      if (part === undefined) throw new PreconditionFailed(key, `blob ${key} was deleted while it was read`);
      parts[i + 1] = part.bytes;
    });
    return { ...first, bytes: Buffer.concat(parts, first.size) };
  }

  private async inParallel(count: number, run: (i: number) => Promise<void>): Promise<void> {
    let next = 0;
    const worker = async () => {
      while (next < count) await run(next++);
    };
    await Promise.all(Array.from({ length: Math.min(this.parallelParts, count) }, worker));
  }

  private versionFrom(etag: string | undefined, key: string): BlobVersion {
    if (etag === undefined || etag === '') throw new FabricError('UNAVAILABLE', `blob ${key}: the object store returned no ETag`);
    return etag;
  }
}

type S3Conditions = MultipartTarget['conditions'];

function conditionsOf(condition: BlobCondition | undefined): S3Conditions {
  return {
    IfNoneMatch: condition && 'ifNoneMatch' in condition ? '*' : undefined,
    IfMatch: condition && 'ifMatch' in condition ? condition.ifMatch : undefined,
  };
}

/** The blob's size from a ranged GET's Content-Range ("bytes 0-99/1234"); `reached` when it names none. */
function sizeFrom(contentRange: string | undefined, reached: number): number {
  const total = /\/(\d+)$/.exec(contentRange ?? '')?.[1];
  return total === undefined ? reached : Number(total);
}
