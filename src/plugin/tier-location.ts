// Where a worker's shared tier is and where its own files go. The shared tier (cold segments and manifests,
// grants, epochs, fences, tenant ids) is a directory every worker mounts (tierDir, the short form of a
// file:// tierUrl) or an S3 bucket (tierUrl s3://bucket/prefix) that workers on many machines share with
// nothing else. What is one worker's alone (its audit log of denials) never goes to the bucket: it goes
// to scratchDir, a local directory, which defaults to the shared directory when there is one (where it
// always went) and must be given with s3://.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import type { BlobStore } from '../blob-store/blob-store';
import { openBlobStore } from '../blob-store/open-blob-store';
import { PosixBlobStore } from '../blob-store/posix/posix-blob-store';
import { FabricError } from '../fabric/errors';
import type { KvFabricWorkerOptions } from './worker-options';

export interface TierLocation {
  /** The shared tier as a URL: file:///path or s3://bucket/prefix/. */
  url: string;
  /** The shared directory when the tier is one: the cold tier keeps its files there itself (O_DIRECT). */
  directory?: string;
  /** This worker's own local directory (its audit log). */
  scratchDir: string;
}

type LocationOptions = Pick<KvFabricWorkerOptions, 'tierDir' | 'tierUrl' | 'scratchDir'>;

/** The options' tier location; INVALID_ARGUMENT for none or two, a URL of another kind, or s3:// with no scratchDir. */
export function tierLocationOf(options: LocationOptions): TierLocation {
  const { tierDir, tierUrl, scratchDir } = options;
  if ((tierDir === undefined) === (tierUrl === undefined)) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      'the shared tier is tierDir (a directory) or tierUrl (file:///path, s3://bucket/prefix): one of them',
    );
  }
  if (scratchDir !== undefined && (typeof scratchDir !== 'string' || scratchDir === '')) {
    throw new FabricError('INVALID_ARGUMENT', 'scratchDir is a non-empty path');
  }
  if (tierDir !== undefined) {
    if (typeof tierDir !== 'string' || tierDir === '') throw new FabricError('INVALID_ARGUMENT', 'tierDir is a non-empty path');
    return directoryLocation(path.resolve(tierDir), scratchDir);
  }
  const url = String(tierUrl);
  if (url.startsWith('file:')) return directoryLocation(fileURLToPath(new URL(url)), scratchDir);
  if (!url.startsWith('s3://')) {
    throw new FabricError('INVALID_ARGUMENT', `tierUrl is file:///path or s3://bucket/prefix, got ${JSON.stringify(url.slice(0, 200))}`);
  }
  if (scratchDir === undefined) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      "with an s3:// tier, scratchDir (--scratch-dir) names a local directory for what is this worker's alone (its audit log)",
    );
  }
  return { url, scratchDir: path.resolve(scratchDir) };
}

function directoryLocation(directory: string, scratchDir: string | undefined): TierLocation {
  return { url: pathToFileURL(directory).href, directory, scratchDir: path.resolve(scratchDir ?? directory) };
}

/** The shared tier's blob store: the directory's POSIX store, or the bucket's S3 store (credentials from the SDK's chain). */
export function openSharedStore(location: TierLocation, s3: KvFabricWorkerOptions['s3'] = {}): Promise<BlobStore> {
  // The directory itself as the operator made it (a mount point may be theirs); its folders are checked by their stores.
  if (location.directory !== undefined) return PosixBlobStore.open(location.directory, { rootAsIs: true });
  return openBlobStore(location.url, {
    ...(s3.endpoint !== undefined ? { endpoint: s3.endpoint } : {}),
    ...(s3.region !== undefined ? { region: s3.region } : {}),
    ...(s3.forcePathStyle !== undefined ? { forcePathStyle: s3.forcePathStyle } : {}),
  });
}
