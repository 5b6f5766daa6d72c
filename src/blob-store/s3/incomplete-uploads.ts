// Multipart uploads a writer started and never completed or aborted (a worker killed mid-upload): S3 keeps
// and bills their parts, yet they belong to no object and no listing of objects shows them. S3 lists them
// (ListMultipartUploads) and drops each with AbortMultipartUpload; a bucket's lifecycle rule
// (AbortIncompleteMultipartUpload, days) does the same, later. The cold tier's orphan sweep calls this with
// its minimum age, so an upload still under way (younger) is left to its writer.
import { AbortMultipartUploadCommand, ListMultipartUploadsCommand, type S3Client } from '@aws-sdk/client-s3';

import { isNotFound } from './s3-errors';

/** A blob store that can drop the incomplete multipart uploads under a prefix (the S3 backend). */
export interface IncompleteUploads {
  /** Aborts the uploads under `prefix` started at least `minAgeMs` ago by the server's clock; returns how many. */
  abortIncompleteUploads(prefix: string, minAgeMs: number): Promise<number>;
}

export function hasIncompleteUploads(store: object): store is IncompleteUploads {
  return typeof (store as Partial<IncompleteUploads>).abortIncompleteUploads === 'function';
}

/** Aborts the uploads of `bucket` under the full key prefix `prefix` started at least `minAgeMs` ago. */
export async function abortIncompleteUploads(client: S3Client, bucket: string, prefix: string, minAgeMs: number): Promise<number> {
  // The server's clock stamps Initiated: with an age in hours (the sweep's), a skew of seconds does not matter.
  const startedBefore = Date.now() - minAgeMs;
  let aborted = 0;
  let keyMarker: string | undefined;
  let uploadIdMarker: string | undefined;
  do {
    const page = await client.send(
      new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix, KeyMarker: keyMarker, UploadIdMarker: uploadIdMarker }),
    );
    for (const { Key, UploadId, Initiated } of page.Uploads ?? []) {
      if (Key === undefined || UploadId === undefined) continue;
      // An upload of unknown age is kept unless every upload goes (minAgeMs 0): it may be a live writer's.
      if (minAgeMs > 0 && !(Initiated !== undefined && Initiated.getTime() <= startedBefore)) continue;
      try {
        await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key, UploadId }));
        aborted++;
      } catch (err) {
        // NoSuchUpload: completed or aborted since it was listed, which is as good.
        if (!isNotFound(err)) throw err;
      }
    }
    keyMarker = page.IsTruncated ? page.NextKeyMarker : undefined;
    uploadIdMarker = page.IsTruncated ? page.NextUploadIdMarker : undefined;
  } while (keyMarker !== undefined);
  return aborted;
}
