// Whether anyone besides this user and root can change which file a path reaches, judged the way ssh's
// StrictModes judges authorized_keys. The path is walked the way the kernel looks it up, following every
// symlink: each directory a name is looked up in must be owned by this user or root, and writable by
// nobody else (its group included), or else be sticky like /tmp: there nobody can rename or remove an
// entry they do not own, so what is ours in it stays ours. A symlink can only be replaced, never changed,
// so its own owner matters only in such a sticky directory, where that owner may replace it; whatever it
// points to is walked and judged the same. The file itself is the caller's to judge (its owner, its mode).
import { lstatSync, readlinkSync, type Stats } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';

/** Linux's own limit on the symlinks followed in one lookup (ELOOP). */
const MAX_LINKS = 40;
const STICKY = 0o1000;

export interface WalkedPath {
  /** What makes the path unsafe, phrased after the path (`: the directory /x has mode 0777, ...`). */
  problem?: string;
  /** The entry the path reaches (lstat of the last name), when nothing was wrong on the way. */
  reached?: Stats;
}

/** Walks `path` as user `uid`; the first problem found on the way, or the entry it reaches. */
export function walkTrustedPath(path: string, uid: number): WalkedPath {
  const pending = [...(isAbsolute(path) ? [] : names(process.cwd())), ...names(path)];
  let current = '/';
  let stat = lstatSync(current);
  let problem = directoryProblem(current, stat, uid);
  let links = 0;
  while (pending.length > 0 && problem === undefined) {
    const name = pending.shift()!;
    if (name === '.') continue;
    // `current` holds no link (links are replaced by their targets below), so its parent is the kernel's `..`.
    if (name === '..') {
      current = dirname(current);
      stat = lstatSync(current);
      continue;
    }
    const next = join(current, name);
    const parent = stat;
    stat = lstatSync(next);
    if (stat.isSymbolicLink()) {
      if (++links > MAX_LINKS) return { problem: `: more than ${MAX_LINKS} symbolic links on the way` };
      if ((parent.mode & 0o022) !== 0 && !owns(stat, uid)) problem = foreignOwner('the link', next, stat, uid, 're-point it', 'chown -h');
      const target = readlinkSync(next);
      pending.unshift(...names(target));
      if (isAbsolute(target)) current = '/';
      stat = lstatSync(current);
      continue;
    }
    if (pending.length === 0) return { reached: stat };
    problem = directoryProblem(next, stat, uid);
    current = next;
  }
  return problem === undefined ? { reached: stat } : { problem };
}

function names(path: string): string[] {
  return path.split('/').filter((name) => name.length > 0);
}

function directoryProblem(path: string, stat: Stats, uid: number): string | undefined {
  // Not a directory: the lookup itself fails (ENOTDIR), which opening the file has reported already.
  if (!stat.isDirectory()) return undefined;
  if (!owns(stat, uid)) return foreignOwner('the directory', path, stat, uid, 'swap what it holds', 'chown');
  const mode = stat.mode & 0o7777;
  if ((mode & 0o022) !== 0 && (mode & STICKY) === 0)
    return (
      `: the directory ${path} has mode 0${mode.toString(8).padStart(3, '0')}, ` +
      `so other users can swap what it holds: run chmod go-w ${path}`
    );
  return undefined;
}

export function owns(stat: Stats, uid: number): boolean {
  return stat.uid === uid || stat.uid === 0;
}

function foreignOwner(what: string, path: string, stat: Stats, uid: number, can: string, fix: string): string {
  return `: ${what} ${path} is ${notOurs(stat.uid, uid)}, so that user can ${can}: run ${fix} ${uid} ${path}`;
}

/** Who owns an entry that is neither this user's nor root's. */
export function notOurs(owner: number, uid: number): string {
  return `owned by uid ${owner}, not by this user (uid ${uid}) or root`;
}
