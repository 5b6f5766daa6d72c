// Set-up step (npm run setup:test-server): installs Temporal's time-skipping test server, the one that
// TestWorkflowEnvironment.createTimeSkipping() runs, and prints where its launcher is. The SDK would
// download a native build from temporal.download, which our machines cannot reach; the same server is
// published on Maven Central (io.temporal:temporal-test-server, main class
// io.temporal.testserver.TestServer), so this fetches it with Maven and writes a launcher script that runs
// it on the JVM. The cache lives outside git: $KVFABRIC_TEST_SERVER_DIR, else
// ~/.cache/kvfabric/test-server, one folder per version. test/support/time-skipping.ts finds the launcher
// through testServerLauncher().
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Connection } from '@temporalio/client';

import { freePort } from '../src/dev-server/dev-server';
import { FabricError } from '../src/fabric/errors';

/** The newest release Maven Central serves; sdk-core passes it the port, as it does the native build. */
export const TEST_SERVER_VERSION = '1.38.0';

/** The logger binding for the slf4j-api the server depends on (1.7.x): warnings and errors to stderr. */
const SLF4J_SIMPLE = 'org.slf4j:slf4j-simple:1.7.36';

/** Pinned, so the fetch does not depend on which plugin version a Maven release defaults to. */
const COPY_DEPENDENCIES = 'org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies';

const MAIN_CLASS = 'io.temporal.testserver.TestServer';

/**
 * JVM settings of every start. sdk-core gives the server 5 s to answer gRPC before it gives up, on a
 * machine that may be shared by several test processes, so start-up time matters most: the class-data
 * archive written at set-up (AppCDS) spares class loading and verification, C1 alone spares compiling
 * for peak speed a test never reaches, and the serial collector spares GC threads. A test server holds
 * a few workflows' histories, so 512 MiB of heap is plenty and bounds what a runaway test can take.
 */
const JVM_OPTIONS = ['-Xmx512m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1', '-Xss512k'];

export function testServerDir(env: NodeJS.ProcessEnv = process.env): string {
  const root = env.KVFABRIC_TEST_SERVER_DIR || path.join(os.homedir(), '.cache', 'kvfabric', 'test-server');
  return path.join(root, TEST_SERVER_VERSION);
}

/** The executable createTimeSkipping is given; it exists only once the install is complete. */
export function testServerLauncher(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(testServerDir(env), 'temporal-test-server');
}

/**
 * The launcher's path, installing the server first when it is missing. Idempotent: the launcher is
 * renamed into place last, so its presence means the jars and the class-data archive are there.
 * UNAVAILABLE when java or mvn is missing, Maven cannot fetch the artifacts, or the installed server
 * does not answer.
 */
export async function ensureTestServer(env: NodeJS.ProcessEnv = process.env, log: (line: string) => void = console.log): Promise<string> {
  const launcher = testServerLauncher(env);
  if (isExecutable(launcher)) return launcher;

  const java = commandPath('java', ['-version']);
  if (!java)
    throw new FabricError(
      'UNAVAILABLE',
      'java is not installed (the test server runs on a JVM, 13 or newer for its class-data archive): apt-get install -y default-jre-headless',
    );
  const mvn = commandPath('mvn', ['-v']);
  if (!mvn)
    throw new FabricError('UNAVAILABLE', 'mvn is not installed (it fetches the test server from Maven Central): apt-get install -y maven');

  const dir = testServerDir(env);
  const lib = path.join(dir, 'lib');
  fs.rmSync(lib, { recursive: true, force: true });
  fs.mkdirSync(lib, { recursive: true });
  fs.writeFileSync(path.join(dir, 'pom.xml'), pomOf(TEST_SERVER_VERSION));
  log(`test server: fetching io.temporal:temporal-test-server:${TEST_SERVER_VERSION} from Maven Central into ${dir}`);
  try {
    // Quiet, and kept: a quiet Maven still writes terminal escapes, and its output only matters on failure.
    execFileSync(
      mvn,
      ['-B', '-q', '-f', path.join(dir, 'pom.xml'), COPY_DEPENDENCIES, `-DoutputDirectory=${lib}`, '-DincludeScope=runtime'],
      { stdio: 'pipe' },
    );
  } catch (err) {
    const output = `${(err as { stdout?: Buffer }).stdout ?? ''}${(err as { stderr?: Buffer }).stderr ?? ''}`.trim();
    if (output) console.error(output);
    throw new FabricError(
      'UNAVAILABLE',
      `mvn could not fetch io.temporal:temporal-test-server:${TEST_SERVER_VERSION} from Maven Central${output ? ' (its output is above)' : ''}`,
    );
  }
  const classpath = fs
    .readdirSync(lib)
    .filter((name) => name.endsWith('.jar'))
    .sort()
    .map((name) => path.join(lib, name));
  if (!classpath.some((jar) => path.basename(jar) === `temporal-test-server-${TEST_SERVER_VERSION}.jar`)) {
    throw new FabricError('UNAVAILABLE', `mvn fetched no temporal-test-server-${TEST_SERVER_VERSION}.jar into ${lib}`);
  }

  log('test server: recording its class-data archive (one start, answered over gRPC)');
  const archive = path.join(dir, 'classes.jsa');
  await recordClassArchive(java, classpath, archive);

  const partial = `${launcher}.${process.pid}.partial`;
  fs.writeFileSync(partial, launcherScript(java, classpath, archive), { mode: 0o755 });
  fs.renameSync(partial, launcher);
  return launcher;
}

/**
 * Starts the server once with -XX:ArchiveClassesAtExit, waits until it answers the workflow
 * service (which proves the install works and loads the classes a first connection needs), then stops
 * it with SIGTERM so the JVM writes the archive as it exits.
 */
async function recordClassArchive(java: string, classpath: string[], archive: string): Promise<void> {
  const port = await freePort();
  const partial = `${archive}.${process.pid}.partial`;
  const args = [
    ...JVM_OPTIONS,
    `-XX:ArchiveClassesAtExit=${partial}`,
    '-Xlog:cds=off',
    '-Xlog:cds+dynamic=off',
    '-cp',
    classpath.join(path.delimiter),
    MAIN_CLASS,
    String(port),
  ];
  const child = spawn(java, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    const connection = await Connection.connect({ address: `127.0.0.1:${port}`, connectTimeout: '60s' });
    try {
      await connection.workflowService.describeNamespace({ namespace: 'default' });
    } finally {
      await connection.close();
    }
  } catch (err) {
    child.kill('SIGKILL');
    await exited;
    throw new FabricError(
      'UNAVAILABLE',
      `the test server did not answer on port ${port}: ${(err as Error).message}${stderr ? `; it printed: ${stderr.trim()}` : ''}`,
    );
  }
  child.kill('SIGTERM');
  await exited;
  if (!fs.existsSync(partial))
    throw new FabricError(
      'UNAVAILABLE',
      `the JVM wrote no class-data archive (${java} may not support AppCDS)${stderr ? `; it printed: ${stderr.trim()}` : ''}`,
    );
  fs.renameSync(partial, archive);
}

function pomOf(version: string): string {
  const [group, artifact, slf4jVersion] = SLF4J_SIMPLE.split(':');
  return `<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by kvfabric's scripts/ensure-test-server.ts: the dependencies of Temporal's test server. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kvfabric</groupId>
  <artifactId>temporal-test-server-runtime</artifactId>
  <version>${version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>io.temporal</groupId><artifactId>temporal-test-server</artifactId><version>${version}</version></dependency>
    <dependency><groupId>${group}</groupId><artifactId>${artifact}</artifactId><version>${slf4jVersion}</version></dependency>
  </dependencies>
</project>
`;
}

/**
 * `exec`, so that the JVM is the process sdk-core started: its shutdown kills that process, and a shell
 * left in between would orphan the server. A class-data archive that this JVM cannot use (the JDK was
 * upgraded since set-up) is ignored, silently; the server then only starts slower.
 */
function launcherScript(java: string, classpath: string[], archive: string): string {
  const quoted = (value: string) => `'${value.replace(/'/g, `'\\''`)}'`;
  const options = [
    ...JVM_OPTIONS,
    '-Xshare:auto',
    `-XX:SharedArchiveFile=${archive}`,
    '-Xlog:cds=off',
    '-Xlog:cds+dynamic=off',
    '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
  ];
  return [
    '#!/bin/sh',
    `# Temporal's time-skipping test server ${TEST_SERVER_VERSION} on the JVM, written by kvfabric's scripts/ensure-test-server.ts.`,
    '# Usage: temporal-test-server <port> [--enable-time-skipping]',
    `exec ${quoted(java)} ${options.map(quoted).join(' ')} -cp ${quoted(classpath.join(path.delimiter))} ${MAIN_CLASS} "$@"`,
    '',
  ].join('\n');
}

/** The command's absolute path when it is on PATH and runs, else undefined. */
function commandPath(name: string, probeArgs: string[]): string | undefined {
  try {
    execFileSync(name, probeArgs, { stdio: 'ignore', timeout: 60_000 });
    return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

// Run as a script (tsx scripts/ensure-test-server.ts); imported, it only provides the functions above.
if (process.argv[1] && path.resolve(process.argv[1]) === __filename) {
  const started = Date.now();
  ensureTestServer().then(
    (launcher) => {
      const seconds = (Date.now() - started) / 1000;
      console.log(`test server: ${launcher}${seconds > 1 ? ` (installed in ${seconds.toFixed(1)} s)` : ''}`);
    },
    (err: unknown) => {
      console.error(err instanceof Error ? err.message : err);
      process.exit(1);
    },
  );
}
