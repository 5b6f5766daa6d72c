// Reads a file named by a setting that holds a secret (key lists, the codec server's token, a capability)
// or decides trust (the workers' trusted public keys), and refuses one that another user could read (a
// secret) or change: one whose mode lets them, one they own, or one on a path they can change (a directory
// they own or can write, a link they can re-point: trusted-path.ts), the way ssh judges authorized_keys.
// A symlink is followed and everything on the way is judged: Kubernetes and Docker mount secrets as
// symlinks, and it is the final file's mode that says who can read it. Errors name the setting, the path,
// what is wrong and the fix, never the content.
import { closeSync, constants, fstatSync, openSync, readFileSync, type Stats } from 'node:fs';

import { FabricError } from '../fabric/errors';
import { notOurs, owns, walkTrustedPath, type WalkedPath } from './trusted-path';

/**
 * - `secret`: refused when others (not owner, not group) have any access, or the group may write it. A
 *   group may read it: that is a grant made on purpose (0640 with a service group, Kubernetes' fsGroup),
 *   while the accident this catches is the 0644 of a default umask.
 * - `public`: may be read by anyone, refused when the group or others may write it: whoever can write
 *   the workers' trusted keys can add a key of their own and mint capabilities every worker accepts.
 */
export type FileSensitivity = 'secret' | 'public';

const FORBIDDEN_BITS: Record<FileSensitivity, number> = { secret: 0o027, public: 0o022 };

export function readProtectedFile(path: string, setting: string, sensitivity: FileSensitivity): string {
  let fd: number;
  try {
    // Non-blocking: a FIFO in a key file's place must be refused below, not wait for a writer forever.
    fd = openSync(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  } catch (err) {
    throw unreadable(setting, path, err);
  }
  try {
    // The descriptor's own status: the file checked is the file read, even if the path changes meanwhile.
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new FabricError('INVALID_ARGUMENT', `${setting}: ${path} is not a regular file`);
    checkOwnerAndPath(path, setting, stat);
    const mode = stat.mode & 0o777;
    if ((mode & FORBIDDEN_BITS[sensitivity]) !== 0) {
      const fix = sensitivity === 'secret' ? `chmod 600 ${path}` : `chmod go-w ${path}`;
      throw new FabricError(
        'PERMISSION_DENIED',
        `${setting}: ${path} has mode 0${mode.toString(8).padStart(3, '0')}, so ${exposure(mode)}: run ${fix}`,
      );
    }
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * The file is this user's or root's, and so is every directory and link on its path (trusted-path.ts).
 * Where there are no users (Windows) there is nothing to judge.
 */
function checkOwnerAndPath(path: string, setting: string, file: Stats): void {
  const uid = process.getuid?.();
  if (uid === undefined) return;
  if (!owns(file, uid))
    throw new FabricError(
      'PERMISSION_DENIED',
      `${setting}: ${path} is ${notOurs(file.uid, uid)}, so that user can change it: run chown ${uid} ${path}`,
    );
  let walked: WalkedPath;
  try {
    walked = walkTrustedPath(path, uid);
  } catch (err) {
    throw unreadable(setting, path, err);
  }
  if (walked.problem !== undefined) throw new FabricError('PERMISSION_DENIED', `${setting}: ${path}${walked.problem}`);
  // The walk judged the path of the file that was opened, unless something moved in between: nobody but
  // this user or root can move anything on a path that passed, so this is a race with one of them.
  if (walked.reached?.ino !== file.ino || walked.reached.dev !== file.dev)
    throw new FabricError('INVALID_ARGUMENT', `${setting}: ${path} changed while it was read: try again`);
}

function unreadable(setting: string, path: string, err: unknown): FabricError {
  return new FabricError(
    'INVALID_ARGUMENT',
    `${setting}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
  );
}

/** Who besides the owner can do what, for the refusal's message. */
function exposure(mode: number): string {
  const others =
    mode & 0o006
      ? `other users can ${[mode & 0o004 ? 'read' : '', mode & 0o002 ? 'change' : ''].filter(Boolean).join(' and ')} it`
      : mode & 0o001
        ? 'other users can open it'
        : '';
  const group = mode & 0o020 ? 'its group can change it' : '';
  return [others, group].filter(Boolean).join(', and ');
}
