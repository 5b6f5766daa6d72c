// Processes as the package tests run them in a scratch project: commands that finish (their exit code
// and output, never thrown for a non-zero exit: what a user sees is the point) and programs that keep
// running (a worker: its output so far, a wait for a line, a signal and its exit code). Output is always
// read as it comes, so a chatty child never blocks on a full pipe.
import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';

export interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

export interface RunOptions {
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** Killed with SIGKILL after this long (default 10 minutes); `signal` then says so. */
  timeoutMs?: number;
}

export function exec(command: string, args: string[], options: RunOptions): Promise<Finished> {
  const started = Date.now();
  const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 600_000);
  return new Promise((resolve, reject) => {
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/** A command that must succeed: its stdout, or an error that carries everything it printed. */
export async function execOk(command: string, args: string[], options: RunOptions): Promise<string> {
  const done = await exec(command, args, options);
  if (done.code !== 0)
    throw new Error(`${command} ${args.join(' ')} failed (${done.code ?? done.signal}) in ${options.cwd}:\n${done.stdout}\n${done.stderr}`);
  return done.stdout;
}

export class RunningProgram {
  private text = '';
  private readonly exit: Promise<number | null>;
  private readonly child: ChildProcess;

  constructor(command: string, args: string[], options: RunOptions) {
    this.child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const append = (chunk: Buffer) => (this.text += chunk.toString());
    this.child.stdout!.on('data', append);
    this.child.stderr!.on('data', append);
    // A shell's number for a death by signal (SIGTERM: 143), which is what a user running it would see.
    this.exit = new Promise((resolve) =>
      this.child.once('close', (code, signal) => resolve(code ?? (signal ? 128 + constants.signals[signal] : null))),
    );
  }

  /** stdout and stderr as they came, interleaved. */
  get output(): string {
    return this.text;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Resolves once the output matches; rejects if the program exits first or the wait runs out. */
  async waitFor(pattern: RegExp, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pattern.test(this.text)) {
      if (!this.running)
        throw new Error(`the program exited (${this.child.exitCode ?? this.child.signalCode}) before printing ${pattern}:\n${this.text}`);
      if (Date.now() > deadline) throw new Error(`no ${pattern} within ${timeoutMs} ms:\n${this.text}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /** Sends the signal and resolves with the exit code (128 + n: ended by signal n). */
  stop(signal: NodeJS.Signals): Promise<number | null> {
    if (this.running) this.child.kill(signal);
    return this.exit;
  }

  exited(): Promise<number | null> {
    return this.exit;
  }
}
