// How the worker process writes its log lines (kvfabric's and the Temporal SDK's, which the runtime
// forwards): `text`, the SDK's default, for people; `json`, one object per line
// {"ts","level","msg","fields"}, for log collectors. Both on stderr, as the SDK's default logger writes.
import { DefaultLogger, type LogEntry, type Logger } from '@temporalio/worker';

export const LOG_FORMATS = ['text', 'json'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export function isLogFormat(value: string): value is LogFormat {
  return (LOG_FORMATS as readonly string[]).includes(value);
}

export function workerLogger(format: LogFormat): Logger {
  return format === 'json' ? new DefaultLogger('INFO', writeJsonLine) : new DefaultLogger('INFO');
}

export function jsonLogLine(entry: LogEntry): string {
  const line = {
    ts: new Date(Number(entry.timestampNanos / 1_000_000n)).toISOString(),
    level: entry.level,
    msg: entry.message,
    fields: entry.meta ?? {},
  };
  return JSON.stringify(line, (_key, value: unknown) =>
    typeof value === 'bigint' ? value.toString() : value instanceof Error ? { name: value.name, message: value.message } : value,
  );
}

function writeJsonLine(entry: LogEntry): void {
  process.stderr.write(`${jsonLogLine(entry)}\n`);
}
