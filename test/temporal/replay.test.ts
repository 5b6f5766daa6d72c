// Determinism guard: histories recorded from real runs (test/temporal/histories, written by
// `npm run record:histories`, payloads sealed with the committed test codec key) are replayed against the
// current workflow code with the same data converter. A change that would break
// running agents -- reordered commands, a new activity before an old one, a removed timer -- fails here.
// Nothing is released yet, so the histories are of the current code only; from the first published
// version on, each release's histories are kept in a subfolder named after it (docs/versioning.md).
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

import { temporal } from '@temporalio/proto';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { expect, it } from 'vitest';

import { workflowsPath } from '../../src/worker/gpu-worker';
import { TEST_DATA_CONVERTER } from './harness';

const HISTORIES = join(__dirname, 'histories');

it('replays every recorded agent history without a determinism error', async () => {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const files = historyFiles();
  expect(files.length).toBeGreaterThanOrEqual(12);
  const histories = files.map((file) => ({
    workflowId: file.replace(/\.json$/, '').replace(/\//g, ':'),
    history: temporal.api.history.v1.History.fromObject(JSON.parse(readFileSync(join(HISTORIES, file), 'utf8'))),
  }));
  const failures: string[] = [];
  for await (const result of Worker.runReplayHistories({ workflowsPath: workflowsPath(), dataConverter: TEST_DATA_CONVERTER }, histories)) {
    if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
  }
  expect(failures).toEqual([]);
}, 120_000);

it("holds the fixtures sealed: every payload but the (indexed, public) search attributes and the SDK's marker data is encrypted", () => {
  const plain: string[] = [];
  const walk = (value: unknown, path: string): void => {
    if (Array.isArray(value)) {
      value.forEach((item, i) => walk(item, `${path}[${i}]`));
      return;
    }
    if (!value || typeof value !== 'object') return;
    const record = value as Record<string, unknown>;
    const encoding = (record.metadata as Record<string, string> | undefined)?.encoding;
    // Exempt: search attributes (indexed, public by design) and what the SDK core writes itself into a
    // local activity's marker: its sequence number, attempt, activity type and times. No agent data: a
    // local activity's result and failure stay sealed.
    const exempt = path.includes('searchAttributes') || path.includes('markerRecordedEventAttributes.details.data');
    if (encoding !== undefined && Buffer.from(encoding, 'base64').toString() !== 'binary/encrypted' && !exempt) plain.push(path);
    for (const [key, child] of Object.entries(record)) walk(child, `${path}.${key}`);
  };
  for (const file of historyFiles()) walk(JSON.parse(readFileSync(join(HISTORIES, file), 'utf8')), file);
  expect(plain).toEqual([]);
});

/** Fixture paths relative to HISTORIES, subfolders included. */
function historyFiles(): string[] {
  return (readdirSync(HISTORIES, { recursive: true }) as string[]).filter((name) => name.endsWith('.json')).sort();
}
