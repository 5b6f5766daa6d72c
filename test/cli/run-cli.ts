// The kvfabric CLI (and the worker's main) as a process through tsx, as a user runs it: what it printed on
// each stream and how it exited.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export const CLI = join(__dirname, '..', '..', 'src', 'cli', 'kvfabric.ts');

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI to the end; `env` is added to this process's environment. */
export function runCli(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return runTsx(CLI, args, env);
}

/** Runs a TypeScript entry point (the CLI, the worker's main) to the end under tsx. */
export function runTsx(entry: string, args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', entry, ...args], { env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** Starts a long-running command (codec-server); resolves once its stdout shows `ready`. */
export async function startCli(
  args: string[],
  env: Record<string, string>,
  ready: RegExp,
): Promise<{ child: ChildProcess; exited: Promise<number | string>; output: () => string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code ?? -1)));
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (ready.test(output)) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((how) => reject(new Error(`kvfabric ${args.join(' ')} exited (${how}) before it was ready:\n${output}`)));
  });
  return { child, exited, output: () => output };
}
