// A GPU worker in a child process (src/worker/main.ts under tsx), resolved once it logs that it is ready:
// what the load script and the test harness both start when a worker must be killable for real.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export interface WorkerProcess {
  child: ChildProcess;
  /** Resolves with the exit code, or the signal that ended it. */
  exited: Promise<number | string>;
  /** Everything it printed so far, stdout and stderr together. */
  output(): string;
}

const WORKER_MAIN = join(__dirname, '..', 'src', 'worker', 'main.ts');

/**
 * Starts the worker (src/worker/main.ts, or `entry`: a test's wrapper around it) with these flags and
 * environment (added to this process's); rejects if it exits before it is ready.
 */
export async function spawnWorkerProcess(
  workerId: string,
  args: string[],
  env: Record<string, string>,
  entry = WORKER_MAIN,
): Promise<WorkerProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', entry, '--worker-id', workerId, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code ?? -1)));
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('kvfabric GPU worker ready')) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((how) => reject(new Error(`worker ${workerId} exited (${how}) before it was ready:\n${output}`)));
  });
  return { child, exited, output: () => output };
}
