// Temp files of writes in progress in a directory that may be a mount shared by processes on several
// machines: named after their writer (a hash of its host, its pid), so a temp file is only removed as stale
// when its writer is known dead (same host, no such process) or it is older than any write could take.
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { errnoOf, ioError } from './io-errors';

const TEMP_PREFIX = '.tmp-';
const TEMP_FILE = /^\.tmp-([0-9a-f]{8})-(\d+)-[0-9a-f]+$/;
/** Identifies this machine in temp file names without putting its host name on a shared mount. */
export const HOST_TAG = createHash('sha256').update(os.hostname()).digest('hex').slice(0, 8);

/** How old a temp file of a writer that may still run must be before housekeeping removes it. */
export const STALE_TEMP_AGE_MS = 60 * 60 * 1000;

export function tempFileName(unique: string): string {
  return `${TEMP_PREFIX}${HOST_TAG}-${process.pid}-${unique}`;
}

export function isTempFile(name: string): boolean {
  return name.startsWith(TEMP_PREFIX);
}

export function processIsGone(pid: number): boolean {
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    // EPERM: it exists under another user.
    return errnoOf(err) === 'ESRCH';
  }
}

/**
 * Removes the temp files of `folder` left by crashed writers, or older than `maxAgeMs`; returns how many.
 * Races with other cleaners are harmless.
 */
export async function removeStaleTempFilesIn(folder: string, maxAgeMs: number): Promise<number> {
  let removed = 0;
  const now = Date.now();
  let names: string[];
  try {
    names = await fsp.readdir(folder);
  } catch (err) {
    throw ioError(err, `listing ${folder}`);
  }
  for (const name of names.filter(isTempFile)) {
    const file = path.join(folder, name);
    const writer = TEMP_FILE.exec(name);
    let stale = writer !== null && writer[1] === HOST_TAG && processIsGone(Number(writer[2]));
    if (!stale) {
      const stat = await fsp.stat(file).catch(() => undefined);
      stale = stat !== undefined && now - stat.mtimeMs >= maxAgeMs;
    }
    if (stale) {
      await fsp.rm(file, { force: true }).catch((err: unknown) => {
        throw ioError(err, `removing the stale temp file ${file}`);
      });
      removed++;
    }
  }
  return removed;
}
