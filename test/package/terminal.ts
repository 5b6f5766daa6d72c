// A newcomer's terminal: shell lines run by bash exactly as a README prints them, one after another, each
// in the directory the previous one left (a `cd` carries over, as it does when a reader types the lines
// into one terminal), with one environment. A line meant for "a terminal of its own" starts a program that
// keeps running (bash execs a single command, so the program is the process that gets the signals).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { exec, RunningProgram, type Finished } from './user-process';

/** Run after the line, as a second command: where the line left the shell, for the next line. */
const RECORD_CWD = '__kvfabric_status=$?; pwd > "$0"; exit $__kvfabric_status';

export class Terminal {
  private readonly scratch = mkdtempSync(join(tmpdir(), 'kvfabric-terminal-'));

  constructor(
    /** Where the next line runs. */
    public cwd: string,
    readonly env: NodeJS.ProcessEnv,
  ) {}

  /** Runs the line to its end; a non-zero exit throws with everything it printed. */
  async run(line: string, timeoutMs = 900_000): Promise<Finished> {
    const cwdFile = join(this.scratch, 'cwd');
    const done = await exec('bash', ['-c', `${line}\n${RECORD_CWD}`, cwdFile], { cwd: this.cwd, env: this.env, timeoutMs });
    if (done.code !== 0)
      throw new Error(`\`${line}\` failed (${done.code ?? done.signal}) in ${this.cwd}:\n${done.stdout}\n${done.stderr}`);
    this.cwd = readFileSync(cwdFile, 'utf8').trim();
    return done;
  }

  /** Starts the line in a terminal of its own, in this one's directory: it keeps running. */
  start(line: string, extraEnv: NodeJS.ProcessEnv = {}): RunningProgram {
    return new RunningProgram('bash', ['-c', line], { cwd: this.cwd, env: { ...this.env, ...extraEnv } });
  }

  close(): void {
    rmSync(this.scratch, { recursive: true, force: true });
  }
}
