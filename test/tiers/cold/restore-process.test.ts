// Restore from the manifest alone in another process: the writer's process is gone, and a fresh one that
// holds only the directory and the master key reads the context back byte for byte.
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

import { afterAll, describe, expect, it } from 'vitest';

import { KeyRing } from '../../../src/tiers/cold';
import { blocksOf, manifestOf, openStore, tempDir } from './helpers';

const REPO = path.resolve(__dirname, '../../..');
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

async function restoreInChild(
  env: Record<string, string>,
): Promise<{ version?: number; tokens?: number; digests?: string[]; error?: string; message?: string; pid?: number }> {
  const run = promisify(execFile);
  const result = await run(process.execPath, ['--import', 'tsx', 'test/tiers/cold/fixtures/restore-child.ts'], {
    cwd: REPO,
    env: { ...process.env, ...env },
  }).catch((err: { stdout?: string }) => ({ stdout: err.stdout ?? '' }));
  return JSON.parse(result.stdout.trim().split('\n').pop() ?? '{}');
}

describe('restore in another process', () => {
  it('reads a context back from the manifest alone, with only the directory and the master key', async () => {
    const dir = tempDir('restore');
    dirs.push(dir);
    const key = randomBytes(32);
    const store = await openStore(dir, new KeyRing([{ id: 'prod-1', key }], 'prod-1'));
    // Two offloads: pages 0-4 from version 1, pages 5-7 from version 2, as an incremental offload writes them.
    const v1 = { tenant: 9, contextId: 'agent-7/run-3', version: 1 };
    const v2 = { ...v1, version: 2 };
    const first = blocksOf(5, 8192, 1);
    const second = blocksOf(3, 8192, 2);
    const refs = [...(await store.writeSegment(v1, first)), ...(await store.writeSegment(v2, second))];
    await store.writeManifest(manifestOf(v2, refs, 8192));
    await store.close();

    const env = {
      COLD_DIR: dir,
      COLD_KEY_ID: 'prod-1',
      COLD_KEY_HEX: key.toString('hex'),
      COLD_CONTEXT: 'agent-7/run-3',
      COLD_TENANT: '9',
    };
    const restored = await restoreInChild(env);
    expect(restored.error, restored.message).toBeUndefined();
    expect(restored.pid).not.toBe(process.pid);
    expect(restored.version).toBe(2);
    expect(restored.tokens).toBe(32);
    expect(restored.digests).toEqual([...first, ...second].map((b) => createHash('sha256').update(b).digest('hex')));

    // The same process without the key, or for another tenant, gets clear errors instead.
    expect(await restoreInChild({ ...env, COLD_KEY_HEX: randomBytes(32).toString('hex') })).toMatchObject({ error: 'INTEGRITY' });
    expect(await restoreInChild({ ...env, COLD_KEY_ID: 'other' })).toMatchObject({ error: 'PERMISSION_DENIED' });
    expect(await restoreInChild({ ...env, COLD_TENANT: '10' })).toMatchObject({ error: 'PERMISSION_DENIED' });
  }, 30_000);
});
