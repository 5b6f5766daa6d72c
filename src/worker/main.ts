#!/usr/bin/env node
// The GPU worker process: `kvfabric-worker --tier-dir /shared/kv ...` (see WORKER_USAGE; -h prints it).
// SIGINT or SIGTERM shuts it down gracefully: running calls finish, held contexts drain to the cold tier.
// A bad flag or setting is one line and exit 2; a failure at run time (Temporal unreachable) one line
// and exit 1, as a JSON object under --log-format json.
import { parseArgs } from 'node:util';

import { Runtime, makeTelemetryFilterString, type Logger } from '@temporalio/worker';

import { FabricError } from '../fabric/errors';
import { WORKER_USAGE, parseWorkerConfig, type WorkerConfig } from './config';
import { createGpuWorker } from './gpu-worker';
import { isLogFormat, workerLogger, type LogFormat } from './log-format';

const SHUTDOWN_SIGNALS = ['SIGINT', 'SIGTERM'] as const;
const PROGRAM = 'kvfabric-worker';
const USAGE_EXIT_CODE = 2;

class WorkerUsageError extends Error {}

/** --help and the log format, read leniently before the full check so that its errors use the format. */
function earlyOptions(argv: string[]): { help: boolean; logFormat: LogFormat } {
  const { values } = parseArgs({ args: argv, strict: false, options: { help: { type: 'boolean', short: 'h' }, 'log-format': { type: 'string' } } });
  const format = values['log-format'] ?? process.env.KVFABRIC_LOG_FORMAT;
  return { help: values.help === true, logFormat: typeof format === 'string' && isLogFormat(format) ? format : 'text' };
}

async function main(argv: string[], logger: () => Logger): Promise<void> {
  let config: WorkerConfig;
  try {
    config = parseWorkerConfig(argv);
  } catch (err) {
    throw new WorkerUsageError((err as Error).message);
  }
  Runtime.install({
    logger: logger(),
    telemetryOptions: {
      logging: { filter: makeTelemetryFilterString({ core: 'WARN' }), forward: {} },
      ...(config.metricsAddress ? { metrics: { prometheus: { bindAddress: config.metricsAddress } } } : {}),
    },
  });
  const worker = await createGpuWorker({ config });
  // The runtime shuts the workers down on SIGINT/SIGTERM; run() then drains and resolves. It stops
  // listening at the first signal, and signal-exit (in node-llama-cpp's dependencies) re-raises a signal
  // nobody else listens to: staying subscribed until the drain is done keeps this process alive for it.
  const stayForDrain = (): void => undefined;
  for (const signal of SHUTDOWN_SIGNALS) process.on(signal, stayForDrain);
  const report = await worker.run();
  for (const signal of SHUTDOWN_SIGNALS) process.off(signal, stayForDrain);
  if (report.failed.length > 0) process.exitCode = 1;
}

const argv = process.argv.slice(2);
const early = earlyOptions(argv);
if (early.help) {
  console.log(WORKER_USAGE);
} else {
  // One logger for the runtime and for a fatal error, made once: the runtime may already hold it.
  let logger: Logger | undefined;
  const loggerOnce = (): Logger => (logger ??= workerLogger(early.logFormat));
  main(argv, loggerOnce).catch((err: unknown) => {
    const usage = err instanceof WorkerUsageError;
    const message = err instanceof Error ? err.message : String(err);
    if (early.logFormat === 'json') {
      loggerOnce().error(message, { code: usage ? 'USAGE' : err instanceof FabricError ? err.code : 'ERROR' });
    } else if (usage) {
      console.error(`${PROGRAM}: ${message} (see ${PROGRAM} --help)`);
    } else {
      console.error(`${PROGRAM}: ${message}${err instanceof FabricError ? ` (${err.code})` : ''}`);
    }
    process.exit(usage ? USAGE_EXIT_CODE : 1);
  });
}
