// The cold tier's directory: `segments/<id>.seg` and `manifests/<context>.manifest`, plus `.tmp-*` files
// of writes in progress. The directory may be a mount shared by processes on several machines, so a temp
// file is only removed as stale when its writer is known dead (same host, no such process) or it is
// older than any write could take.

import path from 'node:path';

import { openPrivateDirectory } from '../../blob-store/posix/private-directory';
import { removeStaleTempFilesIn } from '../../blob-store/posix/temp-files';

export interface ColdDirectory {
  root: string;
  segments: string;
  manifests: string;
}

const SEGMENT_FILE = /^([0-9a-f]{32})\.seg$/;

/**
 * Creates the folders (0700, see private-directory.ts: manifest names are context ids) or checks and
 * tightens existing ones. The root itself is created 0700 when missing but left as it is otherwise: it may
 * be a mount point the operator owns, and it names no context.
 */
export async function prepareDirectory(root: string): Promise<ColdDirectory> {
  const dir = { root: path.resolve(root), segments: path.resolve(root, 'segments'), manifests: path.resolve(root, 'manifests') };
  await openPrivateDirectory(dir.segments, "the cold tier's segments directory");
  await openPrivateDirectory(dir.manifests, "the cold tier's manifests directory");
  return dir;
}

export function segmentFileName(segmentId: string): string {
  return `${segmentId}.seg`;
}

export function segmentIdOfFile(name: string): string | undefined {
  return SEGMENT_FILE.exec(name)?.[1];
}

/** Removes temp files left by crashed writers; returns how many. Races with other cleaners are harmless. */
export async function removeStaleTempFiles(dir: ColdDirectory, maxAgeMs: number): Promise<number> {
  return (await removeStaleTempFilesIn(dir.segments, maxAgeMs)) + (await removeStaleTempFilesIn(dir.manifests, maxAgeMs));
}
