// The clang-format of native/ (`npm run lint`, `npm run format`): the pinned PyPI wheel, installed once into
// .kvfabric/tools/clang-format, so every machine formats with the same version (another version may break
// lines differently, and `--Werror` would then fail on code that this one accepts). Nothing else is used,
// not even a clang-format on PATH.
//   (no flag)  installs when missing and prints the binary's path
//   --check    fails, naming each place, when a native source is not formatted as .clang-format says
//   --write    formats the native sources in place
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const CLANG_FORMAT_VERSION = '23.1.3';
const ROOT = join(__dirname, '..');
const TARGET = join(ROOT, '.kvfabric', 'tools', 'clang-format');
const BINARY = join(TARGET, 'clang_format', 'data', 'bin', 'clang-format');
const SOURCE_DIRS = [join(ROOT, 'native', 'src'), join(ROOT, 'native', 'test')];
const SOURCE_NAME = /\.(cc|h|cu)$/;

function installedVersion(): string | undefined {
  if (!existsSync(BINARY)) return undefined;
  const out = spawnSync(BINARY, ['--version'], { encoding: 'utf8' });
  return out.status === 0 ? /version (\S+)/.exec(out.stdout)?.[1] : undefined;
}

function ensureClangFormat(): string {
  if (installedVersion() === CLANG_FORMAT_VERSION) return BINARY;
  const requirement = `clang-format==${CLANG_FORMAT_VERSION}`;
  try {
    execFileSync(
      'python3',
      ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-deps', '--upgrade', '--target', TARGET, requirement],
      { stdio: 'inherit' },
    );
  } catch {
    throw new Error(`pip could not install ${requirement} into ${relative(ROOT, TARGET)} (it needs python3 with pip)`);
  }
  const version = installedVersion();
  if (version !== CLANG_FORMAT_VERSION)
    throw new Error(`${relative(ROOT, BINARY)} reports version ${version ?? 'none'}, not ${CLANG_FORMAT_VERSION}`);
  return BINARY;
}

function nativeSources(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return nativeSources(path);
      return SOURCE_NAME.test(name) ? [path] : [];
    });
}

function main(): void {
  const binary = ensureClangFormat();
  const mode = process.argv[2];
  if (mode === undefined) {
    console.log(`clang-format ${CLANG_FORMAT_VERSION}: ${binary}`);
    return;
  }
  if (mode !== '--check' && mode !== '--write') throw new Error(`unknown flag ${mode}: use --check or --write`);
  const files = SOURCE_DIRS.flatMap(nativeSources).map((path) => relative(ROOT, path));
  const flags = mode === '--check' ? ['--dry-run', '--Werror'] : ['-i'];
  const run = spawnSync(binary, [...flags, ...files], { cwd: ROOT, stdio: 'inherit' });
  if (run.status !== 0) {
    if (mode === '--check') console.error(`native sources are not formatted: \`npm run format\` formats them`);
    process.exit(run.status ?? 1);
  }
  console.log(`clang-format ${CLANG_FORMAT_VERSION}: ${files.length} native sources ${mode === '--check' ? 'formatted' : 'written'}`);
}

try {
  main();
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
}
