// Set-up step (npm run setup:seaweedfs): builds SeaweedFS's `weed` (Apache-2.0), the S3 server the blob
// store's S3 tests run against (test/support/seaweedfs.ts), and prints where it is. Built from the Go
// module proxy at a pinned pseudo-version, one with SeaweedFS's conditional-write fixes (If-None-Match and
// If-Match decided atomically at the filer, for concurrent writers too). `go install ...@version` refuses
// the module (its go.mod has replace directives), so the module is downloaded, copied to a writable
// folder and built there. A Go older than the module asks for switches to the toolchain it names (Go
// 1.21+ does that itself; an older one, such as Debian 12's 1.19, gets the toolchain from the same proxy).
// The binary is cached outside git: $KVFABRIC_SEAWEEDFS_DIR, else ~/.cache/kvfabric/seaweedfs, one
// folder per version; it appears there last, so its presence means the build finished.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { FabricError } from '../src/fabric/errors';

export const SEAWEEDFS_MODULE = 'github.com/seaweedfs/seaweedfs';
export const SEAWEEDFS_VERSION = 'v0.0.0-20261109003541-7506e5f91cd6';

export function seaweedfsBinary(env: NodeJS.ProcessEnv = process.env): string {
  const root = env.KVFABRIC_SEAWEEDFS_DIR || path.join(os.homedir(), '.cache', 'kvfabric', 'seaweedfs');
  return path.join(root, SEAWEEDFS_VERSION, 'weed');
}

/**
 * The binary's path, building it first when it is missing. UNAVAILABLE when Go is missing, the proxy
 * cannot be reached, or the build or the built binary fails.
 */
export function ensureSeaweedfs(env: NodeJS.ProcessEnv = process.env, log: (line: string) => void = console.log): string {
  const binary = seaweedfsBinary(env);
  // Renamed into place last, and executable: there means built.
  if (fs.existsSync(binary)) return binary;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-seaweedfs-'));
  try {
    let go = goCommand(env);
    // Go before 1.17 wants a module to download into; any Go takes one.
    const holder = path.join(work, 'holder');
    fs.mkdirSync(holder);
    fs.writeFileSync(path.join(holder, 'go.mod'), 'module holder\n\ngo 1.16\n');
    log(`seaweedfs: downloading ${SEAWEEDFS_MODULE}@${SEAWEEDFS_VERSION} through the Go module proxy`);
    const module = JSON.parse(run(go, ['mod', 'download', '-json', `${SEAWEEDFS_MODULE}@${SEAWEEDFS_VERSION}`], holder, goEnv(env))) as {
      Dir?: string;
      Error?: string;
    };
    if (!module.Dir)
      throw new FabricError('UNAVAILABLE', `go mod download gave no module folder${module.Error ? `: ${module.Error}` : ''}`);
    const source = path.join(work, 'src');
    fs.cpSync(module.Dir, source, { recursive: true });
    makeWritable(source); // the module cache is read-only, and the build writes nothing there but must own its folder
    const wanted = /^go\s+(\d+\.\d+(?:\.\d+)?)\s*$/m.exec(fs.readFileSync(path.join(source, 'go.mod'), 'utf8'))?.[1];
    const buildEnv = { ...goEnv(env), GOTOOLCHAIN: 'auto' };
    if (wanted !== undefined && !canSwitch(go, env) && compareVersions(goVersionOf(go, env), wanted) < 0) {
      go = fetchToolchain(go, wanted, holder, work, env, log);
      buildEnv.GOTOOLCHAIN = 'local';
    }
    log(`seaweedfs: building weed (go ${wanted ?? '?'}; several minutes on two cores)`);
    const built = path.join(work, 'weed');
    run(go, ['build', '-buildvcs=false', '-ldflags=-s -w', '-o', built, './weed'], source, buildEnv);
    const version = run(built, ['version'], work, env).trim();
    if (!/version/i.test(version)) throw new FabricError('UNAVAILABLE', `the built weed printed no version: ${version.slice(0, 200)}`);
    fs.mkdirSync(path.dirname(binary), { recursive: true });
    const partial = `${binary}.${process.pid}.partial`;
    fs.copyFileSync(built, partial);
    fs.chmodSync(partial, 0o755);
    fs.renameSync(partial, binary);
    return binary;
  } finally {
    makeWritable(work);
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/** Go 1.21 and later fetch the toolchain a go.mod asks for themselves (GOTOOLCHAIN=auto). */
function canSwitch(go: string, env: NodeJS.ProcessEnv): boolean {
  return compareVersions(goVersionOf(go, env), '1.21') >= 0;
}

/** The Go toolchain `version` for this machine, from the module proxy (golang.org/toolchain), as Go's own switch gets it. */
function fetchToolchain(
  go: string,
  version: string,
  holder: string,
  work: string,
  env: NodeJS.ProcessEnv,
  log: (line: string) => void,
): string {
  const arch = ({ x64: 'amd64', arm64: 'arm64' } as Record<string, string>)[process.arch];
  if (arch === undefined) throw new FabricError('UNAVAILABLE', `no Go toolchain for ${process.arch}: install Go ${version} or newer`);
  const toolchain = `golang.org/toolchain@v0.0.1-go${version}.${process.platform}-${arch}`;
  log(`seaweedfs: this Go is older than ${version} and cannot switch itself; downloading ${toolchain}`);
  const found = JSON.parse(run(go, ['mod', 'download', '-json', toolchain], holder, goEnv(env))) as { Dir?: string };
  if (!found.Dir) throw new FabricError('UNAVAILABLE', `go mod download gave no folder for ${toolchain}`);
  const goroot = path.join(work, 'goroot');
  fs.cpSync(found.Dir, goroot, { recursive: true });
  makeWritable(goroot);
  // Module zips keep no file modes: the toolchain's commands are made executable again, as Go does.
  for (const folder of [path.join(goroot, 'bin'), ...subfolders(path.join(goroot, 'pkg', 'tool'))]) {
    for (const name of fs.readdirSync(folder)) fs.chmodSync(path.join(folder, name), 0o755);
  }
  return path.join(goroot, 'bin', 'go');
}

function subfolders(folder: string): string[] {
  return fs.existsSync(folder) ? fs.readdirSync(folder).map((name) => path.join(folder, name)) : [];
}

function goCommand(env: NodeJS.ProcessEnv): string {
  for (const candidate of ['go', '/usr/local/go/bin/go', '/usr/lib/go/bin/go']) {
    try {
      execFileSync(candidate, ['version'], { stdio: 'ignore', env });
      return candidate;
    } catch {
      // next
    }
  }
  throw new FabricError(
    'UNAVAILABLE',
    'Go is not installed (it builds the S3 server of the tests, SeaweedFS): apt-get install -y golang-go',
  );
}

/** `go version` without the toolchain switch, as "1.19.8". */
function goVersionOf(go: string, env: NodeJS.ProcessEnv): string {
  const printed = run(go, ['version'], os.tmpdir(), { ...goEnv(env), GOTOOLCHAIN: 'local' });
  return /go(\d+\.\d+(?:\.\d+)?)/.exec(printed)?.[1] ?? '0';
}

function compareVersions(a: string, b: string): number {
  const [x, y] = [a, b].map((v) => v.split('.').map(Number));
  for (let i = 0; i < 3; i++) {
    const d = (x![i] ?? 0) - (y![i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** The caller's environment, with Go's module mode on and no vendor or workspace of the caller's. */
function goEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...env, GO111MODULE: 'on', GOWORK: 'off', GOFLAGS: '-mod=mod' };
}

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): string {
  try {
    return execFileSync(command, args, { cwd, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024 });
  } catch (err) {
    const output = `${(err as { stdout?: string }).stdout ?? ''}${(err as { stderr?: string }).stderr ?? ''}`.trim();
    throw new FabricError(
      'UNAVAILABLE',
      `${path.basename(command)} ${args.join(' ')} failed: ${output.slice(-2000) || (err as Error).message}`,
    );
  }
}

function makeWritable(folder: string): void {
  if (!fs.existsSync(folder)) return;
  execFileSync('chmod', ['-R', 'u+w', folder]);
}

// Run as a script (tsx scripts/ensure-seaweedfs.ts); imported, it only provides the functions above.
if (process.argv[1] && path.resolve(process.argv[1]) === __filename) {
  const started = Date.now();
  let binary: string;
  try {
    binary = ensureSeaweedfs();
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  }
  const seconds = (Date.now() - started) / 1000;
  console.log(`seaweedfs: ${binary}${seconds > 1 ? ` (built in ${seconds.toFixed(1)} s)` : ''}`);
}
