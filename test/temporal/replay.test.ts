// Determinism guard: histories recorded from real runs (test/temporal/histories, written by
// `npm run record:histories`) are replayed against the current workflow code. A change that would break
// running agents -- reordered commands, a new activity before an old one, a removed timer -- fails here.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

import { temporal } from '@temporalio/proto';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { expect, it } from 'vitest';

import { workflowsPath } from '../../src/worker/gpu-worker';

const HISTORIES = join(__dirname, 'histories');

it('replays every recorded agent history without a determinism error', async () => {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const files = readdirSync(HISTORIES).filter((name) => name.endsWith('.json')).sort();
  expect(files.length).toBeGreaterThanOrEqual(6);
  const histories = files.map((file) => ({
    workflowId: file.replace(/\.json$/, ''),
    history: temporal.api.history.v1.History.fromObject(JSON.parse(readFileSync(join(HISTORIES, file), 'utf8'))),
  }));
  const failures: string[] = [];
  for await (const result of Worker.runReplayHistories({ workflowsPath: workflowsPath() }, histories)) {
    if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
  }
  expect(failures).toEqual([]);
}, 120_000);
