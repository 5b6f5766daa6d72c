// Compare-and-swap for the POSIX backend, across processes. Before a writer replaces or removes a key at
// version V (or creates it while absent), it claims (key, V) by creating `.claim-<digest of key and V>.1`
// with link(2), which fails on an existing name: one claimant at a time, atomically. Holding the claim, it
// checks that the key is still at V and renames its temp file over it (or unlinks it). Every change of a
// key goes through a claim of its current version, so between that check and the rename nobody else can
// change the key, and a writer that read an older version finds it gone and fails. Versions never return
// (file-version.ts), so claims of a replaced version are simply removed.
//
// A holder that dies between its claim and its rename would block the key for ever, so its claim is
// passed on: on this machine when its process is gone (pid and start time, so a reused pid does not keep
// a dead claim alive), and from another machine sharing the mount when it is older than CLAIM_STALE_MS
// (a claim is held for one stat and one rename). The next claimant then takes `.2` with link(2), so of
// several claimants that saw the same dead holder exactly one proceeds. Across machines a holder frozen
// longer than that may still rename late: there the claim is no lock, and a shared object store (the S3
// backend) is the store to use.
import { createHash } from 'node:crypto';
import { readFileSync, promises as fsp } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { createOnce } from './durable-file';
import { HOST_TAG, processIsGone } from './temp-files';

/** How old another machine's claim must be to be taken as its holder's crash. */
export const CLAIM_STALE_MS = 30_000;
const MAX_WAIT_STEP_MS = 20;

/** This process's start time in clock ticks since boot (Linux /proc), so a reused pid is told apart. */
function startTimeOf(pid: number | 'self'): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces and parentheses); the start time is field 22.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
  } catch {
    return '';
  }
}

const OWN_START = startTimeOf('self');

/** What a claim file says: this machine, this process and its start time. */
export function holderLine(): string {
  return `${HOST_TAG} ${process.pid} ${OWN_START}\n`;
}

function holderIsGone(line: string, ageMs: number): boolean {
  const [host, pidText, start] = line.trim().split(' ');
  const pid = Number(pidText);
  if (host !== HOST_TAG || !Number.isSafeInteger(pid) || pid <= 0) return ageMs >= CLAIM_STALE_MS;
  if (processIsGone(pid)) return true;
  return start !== undefined && start !== '' && OWN_START !== '' && startTimeOf(pid) !== start;
}

export function claimNameOf(base: string, version: string): string {
  return `.claim-${createHash('sha256').update(`${base}\0${version}`).digest('hex').slice(0, 32)}`;
}

/** A held claim. */
export interface VersionClaim {
  /** The key has left the claimed version (replaced, removed, or found moved on): the whole chain goes. */
  settled(): Promise<void>;
  /**
   * The key may still be at the claimed version (the change failed): only this claim goes, so the dead
   * holders below it keep the next claimant off their numbers and exactly one takes this one.
   */
  abandoned(): Promise<void>;
}

/**
 * Claims `version` of the file `base` in `directory`. While another live process holds it, waits, asking
 * `stillAt()` between tries: false means the key has moved on and nothing is claimed (undefined), since
 * whatever the caller meant to check would fail. Every try walks the chain from `.1`.
 */
export async function claimVersion(
  directory: string,
  base: string,
  version: string,
  stillAt: () => Promise<boolean>,
): Promise<VersionClaim | undefined> {
  const name = claimNameOf(base, version);
  const claimFile = (n: number) => path.join(directory, `${name}.${n}`);
  const remove = (n: number) => fsp.rm(claimFile(n), { force: true }).catch(() => undefined);
  let step = 1;
  for (let n = 1; ; ) {
    if (await createOnce(directory, claimFile(n), holderLine())) {
      const held = n;
      return {
        async settled() {
          for (let k = 1; k <= held; k++) await remove(k);
        },
        abandoned: () => remove(held),
      };
    }
    const [line, stat] = await Promise.all([
      fsp.readFile(claimFile(n), 'utf8').catch(() => undefined),
      fsp.stat(claimFile(n)).catch(() => undefined),
    ]);
    if (line !== undefined && stat !== undefined && holderIsGone(line, Date.now() - stat.mtimeMs)) {
      n++;
      continue;
    }
    if (line !== undefined) {
      await sleep(step * (0.5 + Math.random()));
      step = Math.min(step * 2, MAX_WAIT_STEP_MS);
    }
    if (!(await stillAt())) return undefined;
    n = 1;
  }
}
