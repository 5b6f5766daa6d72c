// Attack class: a worker id that is a path. The worker id names the worker's audit file
// (`<tier-dir>/audit/denials-<id>.jsonl`) and its own task queue, so `--worker-id x/../../../outside/pwned`
// wrote the audit file outside the tier directory and made the directory it landed in owner-only. A worker
// id must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit: checked where it is
// set (the worker's flags and environment: a one-line WorkerConfigError naming the setting) and again
// where the plugin's options reach the file system, before anything is created or changed.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { MODELS } from '../../../src/engines/models';
import { FabricError } from '../../../src/fabric/errors';
import { openWorkerMemory } from '../../../src/plugin/worker-memory';
import { keyListText } from '../../../src/security/key-list';
import { parseWorkerConfig } from '../../../src/worker/config';
import { TEST_CODEC_KEYS, TEST_TRUSTED_KEYS } from '../test-keys';

const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-worker-id-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const HOSTILE = [
  'x/../../../outside/pwned',
  '../pwned',
  'a/b',
  '/tmp/pwned',
  '',
  '.',
  '..',
  '.hidden',
  '-flag',
  'w\n2025-01-01 admitted',
  'w\u001b[31m',
  'w\u0000',
  'x'.repeat(129),
];
const UNPRINTABLE = /[\p{Cc}\p{Cf}]/u;
const env: NodeJS.ProcessEnv = {
  KVFABRIC_KEYS: `m1=${Buffer.alloc(32, 7).toString('base64')}`,
  KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
  KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
};
const config = (argv: string[], more: NodeJS.ProcessEnv = {}) =>
  parseWorkerConfig(['--tier-dir', join(scratch, 'tier'), ...argv], { ...env, ...more });

describe('attack: a worker id that is a path, or worse', () => {
  it.each(HOSTILE.map((id) => [JSON.stringify(id), id]))(
    '--worker-id %s and KVFABRIC_WORKER_ID are refused, by name',
    async (_name, id) => {
      for (const [read, setting] of [
        [() => config([`--worker-id=${id}`]), '--worker-id'], // `=`: a value that starts with '-' is still this flag's
        [() => config([], { KVFABRIC_WORKER_ID: id }), 'KVFABRIC_WORKER_ID'],
      ] as const) {
        const err = await Promise.resolve()
          .then(read)
          .then(
            () => new Error('the worker id was accepted'),
            (thrown: Error) => thrown,
          );
        expect(err).toBeInstanceOf(FabricError);
        expect(err).toMatchObject({ code: 'INVALID_ARGUMENT' });
        expect(err.message.startsWith(`${setting}: the worker id `)).toBe(true);
        expect(err.message).toContain("must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit");
        expect(err.message).not.toMatch(UNPRINTABLE);
      }
    },
  );

  it('takes the ids workers use, and its own default (host-pid-random)', () => {
    for (const id of ['gpu-0', 'w-3fa9c2', 'node7.cluster.local-1234-abcdef', 'x'.repeat(128)])
      expect(config(['--worker-id', id]).workerId).toBe(id);
    expect(config([]).workerId).toMatch(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/);
  });

  it('the plugin refuses such an id in its options before it writes anything: no audit file outside, no mode changed', async () => {
    const root = mkdtempSync(join(scratch, 'plugin-'));
    const tierDir = join(root, 'a', 'b', 'tier');
    const outside = join(root, 'outside');
    mkdirSync(outside, { mode: 0o755 });
    const parsed = config([]);
    const options = {
      ...parsed,
      tierDir,
      workerId: 'x/../../../../../outside/pwned',
      engine: { ...parsed.engine, name: 'synthetic', model: MODELS.tiny! },
      pool: { ...parsed.pool, deviceBlocks: 8, hostBlocks: 8, backend: 'cpu' as const },
    };
    const opened = await openWorkerMemory(options, 'kvfabric@pwned', false).then(
      async (memory) => {
        await memory.close();
        return undefined;
      },
      (err: unknown) => err,
    );
    expect(readdirSync(outside)).toEqual([]);
    expect(statSync(outside).mode & 0o777).toBe(0o755);
    expect(opened).toBeInstanceOf(FabricError);
    expect(opened).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('workerId: the worker id ') });
  });
});
