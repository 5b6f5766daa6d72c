// Writes a set of key files into one directory, all or nothing, and never through anything another user
// could have put there. The directory must be a real directory (no symlink) owned by this user that
// neither its group nor others can write: whoever can write it could swap a key file or plant a link.
// No key file may be a symlink or anything but a regular file. Every file first goes to a temporary file
// of its own (O_EXCL, O_NOFOLLOW, mode 0600) and only once all are written are they put in place. An
// existing path is never opened for writing: with `force` the old file is moved aside and the new one
// linked in its place, so the keys land in a new inode owned by this user whoever owned the old one, and
// the old one is moved back if any step fails. A failure leaves the directory as it was (a directory this
// call created is removed again); only a crash between the first and the last move can leave a mix.
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  constants,
  fchmodSync,
  fsyncSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  renameSync,
  rmdirSync,
  unlinkSync,
  writeFileSync,
  type Stats,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';

import { FabricError, type ErrorCode } from '../fabric/errors';

export interface FileToWrite {
  /** A plain file name, no directory part. */
  name: string;
  text: string;
}

export interface WriteKeyFilesOptions {
  /** Replace existing key files (by rename, never by writing into them). */
  force: boolean;
  /** Runs once every temporary file is written, before any is put in place: where a test plays a process racing this one. */
  beforeCommit?: () => void;
}

export interface WrittenKeyFiles {
  paths: string[];
  /** Files replaced under `force` that belonged to another user, who may hold the old keys. */
  replacedForeign: Array<{ path: string; uid: number }>;
}

const FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
/** Create, never open what exists, never follow a symlink: a temporary name nobody else can have prepared. */
const CREATE_NEW = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | (constants.O_NOFOLLOW ?? 0);

/** One file put in place: `aside` holds the file it replaced, `placed` whether ours is at `target` now. */
interface Placement {
  target: string;
  aside?: string;
  placed: boolean;
}

export function writeKeyFiles(directory: string, files: readonly FileToWrite[], options: WriteKeyFilesOptions): WrittenKeyFiles {
  checkNames(files);
  const targets = files.map((file) => join(directory, file.name));
  let created: string[] = [];
  const temporaries: string[] = [];
  const placements: Placement[] = [];
  let existing: Map<string, Stats>;
  try {
    created = safeDirectory(directory);
    existing = existingKeyFiles(targets);
    if (existing.size > 0 && !options.force) {
      const paths = [...existing.keys()];
      throw new FabricError(
        'INVALID_STATE',
        `${paths.join(', ')} already exist${paths.length === 1 ? 's' : ''}: ` +
          'pass --force to replace them (what the old keys signed or sealed stops opening)',
      );
    }
    for (const file of files) temporaries.push(writeTemporary(directory, file));
    options.beforeCommit?.();
    targets.forEach((target, i) => putInPlace(temporaries[i]!, target, existing.has(target), placements));
    fsyncDirectory(directory);
  } catch (err) {
    throw failure(err, directory, rollBack(placements, temporaries, created));
  }
  // Committed: what was moved aside and the temporaries' own names go (the files stay under their targets).
  for (const path of [...placements.flatMap(({ aside }) => (aside ? [aside] : [])), ...temporaries]) unlinkIfThere(path);
  const uid = process.getuid?.();
  return {
    paths: targets,
    replacedForeign: [...existing]
      .filter(([, stat]) => uid !== undefined && stat.uid !== uid)
      .map(([path, stat]) => ({ path, uid: stat.uid })),
  };
}

function checkNames(files: readonly FileToWrite[]): void {
  const names = files.map((file) => file.name);
  const bad = names.find((name) => !FILE_NAME.test(name));
  if (bad !== undefined) throw new FabricError('INVALID_ARGUMENT', `key file name '${bad}' must be a plain file name`);
  if (new Set(names).size !== names.length) throw new FabricError('INVALID_ARGUMENT', `key file names must be unique: ${names.join(', ')}`);
}

/**
 * Creates the directory (mode 0700) when it is missing, then refuses it unless it is a real directory of
 * this user's that nobody else can write. Returns the directories it created, outermost first.
 */
function safeDirectory(directory: string): string[] {
  const created: string[] = [];
  try {
    let stat = lstatIfThere(directory);
    if (!stat) {
      const first = mkdirSync(directory, { recursive: true, mode: 0o700 });
      for (let path = directory; first !== undefined; path = dirname(path)) {
        created.unshift(path);
        if (path === first || dirname(path) === path) break;
      }
      // The umask may have narrowed 0700; nothing else can have widened it.
      for (const path of created) chmodSync(path, 0o700);
      stat = lstatSync(directory);
    }
    if (stat.isSymbolicLink())
      throw new FabricError(
        'INVALID_ARGUMENT',
        `${directory} is a symbolic link: keygen writes keys only into a real directory (give --out the directory itself)`,
      );
    if (!stat.isDirectory()) throw new FabricError('INVALID_ARGUMENT', `${directory} is not a directory`);
    const uid = process.getuid?.();
    if (uid !== undefined && stat.uid !== uid) {
      throw new FabricError(
        'PERMISSION_DENIED',
        `${directory} belongs to uid ${stat.uid}, not to this user (uid ${uid}), ` +
          'who could replace the keys in it: use a directory of your own',
      );
    }
    if ((stat.mode & 0o022) !== 0) {
      throw new FabricError(
        'PERMISSION_DENIED',
        `${directory} has mode 0${(stat.mode & 0o777).toString(8)}: others can write it, and so swap a key file or plant a link; ` +
          `run chmod go-w ${directory} (or chmod 700) first, or use another directory`,
      );
    }
    return created;
  } catch (err) {
    removeDirectories(created);
    throw err;
  }
}

/** The key files that already exist (regular files only: a symlink or anything else there is refused). */
function existingKeyFiles(targets: readonly string[]): Map<string, Stats> {
  const existing = new Map<string, Stats>();
  for (const target of targets) {
    const stat = lstatIfThere(target);
    if (!stat) continue;
    // Refused even with --force: something put a link where a key file goes; replacing it would hide that.
    if (stat.isSymbolicLink())
      throw new FabricError(
        'INVALID_ARGUMENT',
        `${target} is a symbolic link: keygen never writes through one nor replaces one; remove it and run keygen again`,
      );
    if (!stat.isFile()) throw new FabricError('INVALID_ARGUMENT', `${target} is not a regular file: move it away and run keygen again`);
    existing.set(target, stat);
  }
  return existing;
}

function writeTemporary(directory: string, file: FileToWrite): string {
  const temporary = join(directory, `.${file.name}.${randomBytes(6).toString('hex')}.tmp`);
  const fd = openSync(temporary, CREATE_NEW, 0o600);
  try {
    // The umask may have narrowed 0600 (to 0400, say): make it exactly 0600 before a byte of key goes in.
    fchmodSync(fd, 0o600);
    writeFileSync(fd, file.text);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    unlinkIfThere(temporary);
    throw err;
  }
  closeSync(fd);
  return temporary;
}

/**
 * Links the written file in at `target` and records it in `placements` (before acting, so a rollback sees
 * a half-done step). link() never replaces anything, so a file or link that appeared at a target checked
 * empty stops the commit instead of being overwritten. An existing file is first renamed aside (never
 * opened), which keeps it whole to move back on failure.
 */
function putInPlace(temporary: string, target: string, exists: boolean, placements: Placement[]): void {
  const placement: Placement = { target, placed: false };
  if (exists) {
    const aside = join(dirname(target), `.${basename(target)}.${randomBytes(6).toString('hex')}.old`);
    renameSync(target, aside);
    placement.aside = aside;
  }
  placements.push(placement);
  linkSync(temporary, target);
  placement.placed = true;
}

/**
 * Undoes every placement (newest first), removes the temporaries and the directories this call created; returns what
 * could not be undone.
 */
function rollBack(placements: Placement[], temporaries: readonly string[], created: readonly string[]): string[] {
  const stuck: string[] = [];
  for (const { target, aside, placed } of [...placements].reverse()) {
    try {
      if (placed) unlinkSync(target);
      if (aside) renameSync(aside, target);
    } catch (err) {
      stuck.push(
        `${target} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}${aside ? `; its previous file is ${aside}` : ''})`,
      );
    }
  }
  for (const temporary of temporaries) unlinkIfThere(temporary);
  removeDirectories(created);
  return stuck;
}

/** The error to throw: typed, naming the path, saying whether the directory is as it was. */
function failure(err: unknown, directory: string, stuck: readonly string[]): Error {
  const outcome = stuck.length === 0 ? `nothing in ${directory} was changed` : `could not undo ${stuck.join(', ')}`;
  if (err instanceof FabricError) return stuck.length === 0 ? err : new FabricError(err.code, `${err.message}; ${outcome}`);
  const errno = err as NodeJS.ErrnoException & { dest?: string };
  if (typeof errno.code !== 'string') return err instanceof Error ? err : new Error(String(err));
  const what =
    errno.code === 'EEXIST'
      ? `${errno.dest ?? errno.path ?? directory} appeared while keygen was writing (another process?)`
      : `keygen could not ${errno.syscall ?? 'write'} ${errno.path ?? directory}${errno.dest ? ` -> ${errno.dest}` : ''} (${errno.code})`;
  return new FabricError(codeOf(errno.code), `${what}: ${outcome}`);
}

function codeOf(errno: string): ErrorCode {
  if (errno === 'EACCES' || errno === 'EPERM' || errno === 'EROFS') return 'PERMISSION_DENIED';
  if (errno === 'ENOSPC' || errno === 'EDQUOT') return 'STORAGE_FULL';
  return 'INVALID_STATE';
}

/** The renames and links are durable once the directory's own entry list is on disk. */
function fsyncDirectory(directory: string): void {
  const fd = openSync(directory, constants.O_RDONLY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function lstatIfThere(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

function unlinkIfThere(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Already gone, or never made: either way not there.
  }
}

/** Innermost first; rmdir removes only an empty directory, so nothing that someone else put there. */
function removeDirectories(created: readonly string[]): void {
  for (const path of [...created].reverse()) {
    try {
      rmdirSync(path);
    } catch {
      // Not empty or gone: left as is.
    }
  }
}
