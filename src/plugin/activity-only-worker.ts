// The Worker of a GPU worker's own queue (`${taskQueue}@${workerId}`): activities only, by design. The
// SDK's Worker warns "No workflows registered, not polling for workflow tasks" whenever it starts without
// workflows, which here would be logged at every start and read as a problem. This Worker drops that one
// warning from its own logger and passes every other line on unchanged; a user's Worker with no workflows
// still warns, since there it may be a mistake.
import type { MetricMeter } from '@temporalio/common';
import {
  Worker,
  type Logger,
  type LogLevel,
  type LogMetadata,
  type NativeConnection,
  type Runtime,
  type WorkerPlugin,
} from '@temporalio/worker';
import type { NativeWorkerLike } from '@temporalio/worker/lib/worker';
import type { CompiledWorkerOptions } from '@temporalio/worker/lib/worker-options';
import type { WorkflowCreator } from '@temporalio/worker/lib/workflow/interface';

/** The SDK's warning, word for word (@temporalio/worker's Worker.workflow$). */
export const NO_WORKFLOWS_WARNING = 'No workflows registered, not polling for workflow tasks';

export class ActivityOnlyWorker extends Worker {
  // The SDK's own constructor (Worker.create calls `new this(...)`), with the logger filtered.
  protected constructor(
    runtime: Runtime,
    nativeWorker: NativeWorkerLike,
    workflowCreator: WorkflowCreator | undefined,
    options: CompiledWorkerOptions,
    logger: Logger,
    metricMeter: MetricMeter,
    plugins: WorkerPlugin[],
    connection?: NativeConnection,
    isReplayWorker?: boolean,
  ) {
    super(
      runtime,
      nativeWorker,
      workflowCreator,
      options,
      withoutNoWorkflowsWarning(logger),
      metricMeter,
      plugins,
      connection,
      isReplayWorker,
    );
  }
}

/** `logger` without the no-workflows warning. */
export function withoutNoWorkflowsWarning(logger: Logger): Logger {
  const expected = (level: LogLevel, message: string) => level === 'WARN' && message === NO_WORKFLOWS_WARNING;
  return {
    log: (level: LogLevel, message: string, meta?: LogMetadata) =>
      expected(level, message) ? undefined : logger.log(level, message, meta),
    trace: (message: string, meta?: LogMetadata) => logger.trace(message, meta),
    debug: (message: string, meta?: LogMetadata) => logger.debug(message, meta),
    info: (message: string, meta?: LogMetadata) => logger.info(message, meta),
    warn: (message: string, meta?: LogMetadata) => (expected('WARN', message) ? undefined : logger.warn(message, meta)),
    error: (message: string, meta?: LogMetadata) => logger.error(message, meta),
  };
}
