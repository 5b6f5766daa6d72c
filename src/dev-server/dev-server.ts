// The embedded Temporal server of the demo and the tests: `temporal server start-dev` on free ports,
// with the agents' search attributes registered, an optional SQLite file (history survives restarts,
// so the UI can show a finished demo later) and optional dynamic config (tests lower the
// continue-as-new suggestion threshold with it).
import { spawn, type ChildProcess } from 'node:child_process';
import { openSync, closeSync } from 'node:fs';
import { createServer } from 'node:net';

import { Connection } from '@temporalio/client';

import { AGENT_SEARCH_ATTRIBUTES } from '../workflows/search-attributes';
import { findTemporalCli } from './temporal-cli';

export interface DevServerOptions {
  /** The CLI binary (default: findTemporalCli()). */
  cli?: string;
  /** SQLite file for persistence; in memory when absent. */
  dbFile?: string;
  /** Front-end gRPC port (default: a free one). */
  port?: number;
  /**
   * Serve the Web UI, on this port (default: a free one) or not at all; `codecEndpoint` points the UI at
   * a codec server so it shows decoded payloads (`--ui-codec-endpoint`).
   */
  ui?: boolean | { port: number; codecEndpoint?: string };
  searchAttributes?: ReadonlyArray<{ name: string; type: string }>;
  /** Dynamic config values, e.g. { 'limit.historyCount.suggestContinueAsNew': 60 }. */
  dynamicConfig?: Record<string, string | number | boolean>;
  /** Server output goes here (default: discarded). */
  logFile?: string;
  readyTimeoutMs?: number;
}

export interface DevServer {
  address: string;
  namespace: string;
  uiUrl?: string;
  pid: number;
  stop(): Promise<void>;
}

/**
 * What the embedded server changes from the dev server's defaults (a caller's dynamicConfig wins).
 * `history.transferProcessorMaxPollRPS` (default 20, per history shard; the dev server has one shard)
 * caps how often activity and workflow tasks are handed on to matching: every agent operation needs two
 * (its activity, then the workflow task its result wakes), so at the default, once the limiter's burst is
 * spent, the whole server runs ten operations a second and each waits its turn
 * (docs/operations.md#temporal-server-settings). At 1000 the limit stays out of an agent's way.
 */
export const DEV_SERVER_DYNAMIC_CONFIG: Readonly<Record<string, number>> = { 'history.transferProcessorMaxPollRPS': 1000 };

/** The `temporal` command line of a dev server on `port` (and the UI on `uiPort`, when given). */
export function devServerArgs(options: DevServerOptions, port: number, uiPort: number | undefined): string[] {
  const args = ['server', 'start-dev', '--ip', '127.0.0.1', '--port', String(port), '--log-level', 'warn'];
  if (uiPort === undefined) args.push('--headless');
  else args.push('--ui-port', String(uiPort));
  if (typeof options.ui === 'object' && options.ui.codecEndpoint) args.push('--ui-codec-endpoint', options.ui.codecEndpoint);
  if (options.dbFile) args.push('--db-filename', options.dbFile);
  for (const { name, type } of options.searchAttributes ?? AGENT_SEARCH_ATTRIBUTES) args.push('--search-attribute', `${name}=${type}`);
  for (const [key, value] of Object.entries({ ...DEV_SERVER_DYNAMIC_CONFIG, ...options.dynamicConfig })) {
    args.push('--dynamic-config-value', `${key}=${JSON.stringify(value)}`);
  }
  return args;
}

/**
 * Ports are chosen free just before the server binds them (its own HTTP, metrics and internal ports too):
 * another process can take one in between, and the server then exits before serving. It is started again
 * on fresh ports, up to this many times in all, unless the caller fixed the port.
 */
const START_ATTEMPTS = 3;

export async function startDevServer(options: DevServerOptions = {}): Promise<DevServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(options);
    } catch (err) {
      if (!(err instanceof ExitedBeforeServing) || options.port !== undefined || attempt >= START_ATTEMPTS) throw err;
    }
  }
}

class ExitedBeforeServing extends Error {}

async function startOnce(options: DevServerOptions): Promise<DevServer> {
  const cli = options.cli ?? findTemporalCli();
  const port = options.port ?? (await freePort());
  const uiPort = options.ui === undefined || options.ui === false ? undefined : options.ui === true ? await freePort() : options.ui.port;
  const args = devServerArgs(options, port, uiPort);
  const log = options.logFile ? openSync(options.logFile, 'a') : 'pipe';
  const child = spawn(cli, args, { stdio: ['ignore', log, log] });
  if (typeof log === 'number') closeSync(log);
  const lastOutput = keepTail(child);
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  const address = `127.0.0.1:${port}`;
  try {
    await waitUntilServing(child, address, options.readyTimeoutMs ?? 60_000);
  } catch (err) {
    process.removeListener('exit', killOnExit);
    child.kill('SIGKILL');
    const said = lastOutput();
    if (said && err instanceof Error) err.message += `; it said: ${said}`;
    throw err;
  }
  return {
    address,
    namespace: 'default',
    ...(uiPort !== undefined ? { uiUrl: `http://localhost:${uiPort}` } : {}),
    pid: child.pid!,
    async stop(): Promise<void> {
      process.removeListener('exit', killOnExit);
      await stopProcess(child);
    },
  };
}

async function waitUntilServing(child: ChildProcess, address: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited: Error | undefined;
  child.once('exit', (code, signal) => (exited = new ExitedBeforeServing(`the dev server exited (${signal ?? code}) before serving`)));
  child.once('error', (err) => (exited = new Error(`the dev server did not start: ${err.message}`)));
  for (;;) {
    if (exited) throw exited;
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1000 });
      try {
        await connection.workflowService.describeNamespace({ namespace: 'default' });
        return;
      } finally {
        await connection.close();
      }
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`the dev server at ${address} did not serve within ${timeoutMs} ms: ${String(err)}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** The last lines the server printed (stdout and stderr piped here): why it exited, when it did. */
function keepTail(child: ChildProcess, maxChars = 1000): () => string {
  let tail = '';
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString('utf8')).slice(-maxChars);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  return () => tail.trim().split('\n').slice(-3).join(' | ');
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
