// Starting the embedded dev server when a port it picked was taken meanwhile: it exits before serving, and
// the start is tried again on fresh ports. A real CLI behind a wrapper that fails its first runs (as a
// lost port race does); a server that never starts still fails, after a bounded number of tries.
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { expect, it } from 'vitest';

import { startDevServer } from '../../src/dev-server/dev-server';
import { findTemporalCli } from '../../src/dev-server/temporal-cli';

/** A `temporal` that exits with status 1 on its first `failures` runs, then is the real CLI; counts its runs. */
function flakyCli(failures: number): { cli: string; runs: () => number } {
  const dir = mkdtempSync(join(tmpdir(), 'kvfabric-flaky-cli-'));
  const count = join(dir, 'runs');
  writeFileSync(count, '');
  const cli = join(dir, 'temporal');
  writeFileSync(
    cli,
    `#!/bin/sh\necho run >> '${count}'\n[ "$(wc -l < '${count}')" -le ${failures} ] && exit 1\nexec '${findTemporalCli()}' "$@"\n`,
  );
  chmodSync(cli, 0o755);
  return { cli, runs: () => readFileSync(count, 'utf8').split('\n').filter(Boolean).length };
}

it('starts again on fresh ports when the server exits before serving', async () => {
  const { cli, runs } = flakyCli(2);
  const server = await startDevServer({ cli });
  try {
    expect(runs()).toBe(3);
    expect(server.address).toMatch(/^127\.0\.0\.1:\d+$/);
  } finally {
    await server.stop();
  }
}, 90_000);

it('gives up after three starts, naming the exit, and never retries a port the caller fixed', async () => {
  const always = flakyCli(100);
  await expect(startDevServer({ cli: always.cli })).rejects.toThrow(/exited \(1\) before serving/);
  expect(always.runs()).toBe(3);
  const fixed = flakyCli(100);
  await expect(startDevServer({ cli: fixed.cli, port: 1 })).rejects.toThrow(/exited \(1\) before serving/);
  expect(fixed.runs()).toBe(1);
});
