#!/usr/bin/env node
// The GPU worker process: `kvfabric-worker --tier-dir /shared/kv ...` (see WORKER_USAGE; -h prints it).
// SIGINT or SIGTERM shuts it down gracefully: running calls finish, held contexts drain to the cold tier
// (the worker plugin keeps the process alive for that). Started by npm (npx), whose shell does not pass
// signals on, it also stops when that shell is gone (npm-parent.ts). A bad flag or setting is one line
// naming it and exit 2; a failure at run time (Temporal unreachable) one line and exit 1, as a JSON
// object under --log-format json. Never a stack trace: these are the operator's to fix.
import { parseArgs } from 'node:util';

import { Runtime, makeTelemetryFilterString, type Logger } from '@temporalio/worker';

import { FabricError } from '../fabric/errors';
import { WORKER_USAGE, parseWorkerConfig } from './config';
import { WorkerConfigError } from './config-error';
import { createGpuWorker } from './gpu-worker';
import { isLogFormat, workerLogger, type LogFormat } from './log-format';
import { startedByNpm, watchParent } from './npm-parent';

const PROGRAM = 'kvfabric-worker';
/** Read first: the shell npm started this process through may die while the worker is still starting. */
const PARENT_AT_START = process.ppid;
const USAGE_EXIT_CODE = 2;

/** --help and the log format, read leniently before the full check so that its errors use the format. */
function earlyOptions(argv: string[]): { help: boolean; logFormat: LogFormat } {
  const { values } = parseArgs({
    args: argv,
    strict: false,
    options: { help: { type: 'boolean', short: 'h' }, 'log-format': { type: 'string' } },
  });
  const format = values['log-format'] ?? process.env.KVFABRIC_LOG_FORMAT;
  return { help: values.help === true, logFormat: typeof format === 'string' && isLogFormat(format) ? format : 'text' };
}

async function main(argv: string[], logger: () => Logger): Promise<void> {
  const config = parseWorkerConfig(argv);
  Runtime.install({
    logger: logger(),
    telemetryOptions: {
      logging: { filter: makeTelemetryFilterString({ core: 'WARN' }), forward: {} },
      ...(config.metricsAddress ? { metrics: { prometheus: { bindAddress: config.metricsAddress } } } : {}),
    },
  });
  const worker = await createGpuWorker({ config });
  // The runtime shuts the workers down on SIGINT/SIGTERM; run() then drains and resolves.
  const parent = startedByNpm()
    ? watchParent(PARENT_AT_START, () => {
        Runtime.instance().logger.info(
          'kvfabric GPU worker stopping: the npm process that started it is gone (npm does not pass signals on through its shell)',
          { holder: worker.holder, parent: PARENT_AT_START },
        );
        worker.shutdown();
      })
    : undefined;
  try {
    const report = await worker.run();
    if (report.failed.length > 0) process.exitCode = 1;
  } finally {
    parent?.stop();
  }
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
    const usage = err instanceof WorkerConfigError;
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
