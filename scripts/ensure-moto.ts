// Set-up step (npm run setup:moto, and before the tests): installs moto (Apache-2.0), a second S3
// implementation the fence race runs against beside SeaweedFS (test/support/moto.ts), and prints where
// it is. Its S3 server and the few packages that server needs, at pinned versions, from PyPI with pip,
// into a folder of their own (pip --target, no virtual environment: Debian's python3 lacks venv unless
// python3-venv is installed): $KVFABRIC_MOTO_DIR, else ~/.cache/kvfabric/moto, one folder per version.
// The install goes to a temp folder renamed into place last, so its presence means it finished.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { FabricError } from '../src/fabric/errors';

export const MOTO_VERSION = '5.2.6';
/** moto's S3 backend, and the web framework its server runs on (what moto[server] would add, minus other services). */
const REQUIREMENTS = [`moto[s3]==${MOTO_VERSION}`, 'flask==3.1.3', 'flask-cors==6.0.5'];

/** The folder to put on PYTHONPATH for `python3 -m moto.server`. */
export function motoPackages(env: NodeJS.ProcessEnv = process.env): string {
  const root = env.KVFABRIC_MOTO_DIR || path.join(os.homedir(), '.cache', 'kvfabric', 'moto');
  return path.join(root, MOTO_VERSION);
}

/** The packages' folder, installing them first when missing. UNAVAILABLE when pip fails or cannot reach PyPI. */
export function ensureMoto(env: NodeJS.ProcessEnv = process.env, log: (line: string) => void = console.log): string {
  const target = motoPackages(env);
  if (fs.existsSync(target)) return target;
  fs.mkdirSync(path.dirname(target), { recursive: true });
  const work = fs.mkdtempSync(`${target}.partial-`);
  try {
    log(`moto: installing ${REQUIREMENTS.join(', ')} from PyPI`);
    execFileSync(
      'python3',
      // --ignore-installed and --no-warn-conflicts: the folder has all it needs whatever the system's python3 holds.
      [
        '-m',
        'pip',
        'install',
        '--quiet',
        '--disable-pip-version-check',
        '--ignore-installed',
        '--no-warn-conflicts',
        '--target',
        work,
        ...REQUIREMENTS,
      ],
      { stdio: ['ignore', 'inherit', 'inherit'], env: { ...env, PIP_NO_WARN_SCRIPT_LOCATION: '1', PIP_ROOT_USER_ACTION: 'ignore' } },
    );
    fs.renameSync(work, target);
    return target;
  } catch (err) {
    fs.rmSync(work, { recursive: true, force: true });
    if (fs.existsSync(target)) return target; // another set-up finished first
    throw new FabricError(
      'UNAVAILABLE',
      `pip could not install moto ${MOTO_VERSION} into ${target} (it needs python3 with pip, and PyPI): ${(err as Error).message}`,
    );
  }
}

// Run as a script (tsx scripts/ensure-moto.ts); imported, it only provides the functions above.
if (process.argv[1] && path.resolve(process.argv[1]) === __filename) {
  try {
    console.log(`moto: ${ensureMoto()}`);
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  }
}
