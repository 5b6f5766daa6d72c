// The folders of the shared tier directory name agent ids (grants, epochs, fences, cold manifests, the
// denial audit): only the workers' own user may list them. Creates each one 0700, and checks one that
// already exists: a folder that others can merely list or enter is tightened to 0700 (nothing can have
// been added to or taken from it); one that another user owns, or that its group or others can write, is
// refused and left as it is, since someone else may already have planted, swapped or deleted records in
// it (a grant naming them, a manifest, the epoch entry that revoked a token), and tightening it quietly
// would bless that. Here, below the shared directory and the audit log, because both use it.
import { promises as fsp } from 'node:fs';

import { FabricError } from '../../fabric/errors';

export const PRIVATE_DIRECTORY_MODE = 0o700;
/** Record files in those folders: read and written by the owner only. */
export const PRIVATE_FILE_MODE = 0o600;

/**
 * Creates `directory` (missing parents too, each 0700) or checks and tightens the existing one.
 * PERMISSION_DENIED (nothing changed) for one another user owns or the group or others can write;
 * UNAVAILABLE when the path is no directory or the file system fails. `what` names the folder in errors
 * ("the grants directory").
 */
export async function openPrivateDirectory(directory: string, what: string): Promise<void> {
  try {
    await fsp.mkdir(directory, { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
  } catch (err) {
    // A file in the way (EEXIST, ENOTDIR) included: storage that cannot be used, like any broken mount.
    throw new FabricError('UNAVAILABLE', `${what} ${directory}: ${(err as Error).message}`);
  }
  // Followed if a link: an operator may point a folder at another volume; what counts is who can use the folder reached.
  const stat = await fsp.stat(directory).catch((err: unknown) => {
    throw new FabricError('UNAVAILABLE', `${what} ${directory}: ${(err as Error).message}`);
  });
  if (!stat.isDirectory()) throw new FabricError('UNAVAILABLE', `${what} ${directory} is not a directory`);
  const uid = process.getuid?.();
  if (uid === undefined) return; // no POSIX owners or modes (Windows): the volume's ACLs decide
  if (stat.uid !== uid) {
    throw new FabricError(
      'PERMISSION_DENIED',
      `${what} ${directory} belongs to user ${stat.uid}, not to this worker's user ${uid}: ` +
        'its records cannot be trusted; give it to this user (chown) or remove it',
    );
  }
  const mode = stat.mode & 0o7777;
  if ((mode & 0o022) !== 0) {
    throw new FabricError(
      'PERMISSION_DENIED',
      `${what} ${directory} has mode 0${mode.toString(8).padStart(3, '0')}, so ${mode & 0o002 ? 'other users' : 'its group'} ` +
        `can add, replace or delete its records: check what is in it, then run chmod 700 ${directory}`,
    );
  }
  if ((mode & 0o077) !== 0) {
    await fsp.chmod(directory, mode & ~0o077).catch((err: unknown) => {
      throw new FabricError('UNAVAILABLE', `${what} ${directory}: tightening its mode to 0700: ${(err as Error).message}`);
    });
  }
}
