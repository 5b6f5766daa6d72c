// Where a worker's shared tier is (--tier-dir, --tier-url file:// or s3://) and where its own files go
// (--scratch-dir): from the flags and environment to the options, checked before anything opens.
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric/errors';
import { openSharedStore, tierLocationOf } from '../../src/plugin/tier-location';
import { parseWorkerConfig } from '../../src/worker/config';
import { keyListText, TEST_CODEC_KEYS, TEST_TRUSTED_KEYS } from '../security/test-keys';

const env = {
  KVFABRIC_KEYS: `k1=${randomBytes(32).toString('base64')}`,
  KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
  KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
};

function refusal(run: () => unknown): FabricError {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(FabricError);
    return err as FabricError;
  }
  throw new Error('expected a refusal');
}

describe('the tier location', () => {
  it('is a directory (tierDir, or a file:// tierUrl) whose scratch is the directory itself unless given', () => {
    expect(tierLocationOf({ tierDir: '/mnt/kv' })).toEqual({ url: 'file:///mnt/kv', directory: '/mnt/kv', scratchDir: '/mnt/kv' });
    expect(tierLocationOf({ tierUrl: 'file:///mnt/kv', scratchDir: '/var/kv' })).toEqual({
      url: 'file:///mnt/kv',
      directory: '/mnt/kv',
      scratchDir: '/var/kv',
    });
  });

  it('is a bucket (an s3:// tierUrl) only with a local scratch directory, and one of the two ways only', () => {
    expect(tierLocationOf({ tierUrl: 's3://bucket/kv/', scratchDir: '/var/kv' })).toEqual({
      url: 's3://bucket/kv/',
      scratchDir: '/var/kv',
    });
    expect(refusal(() => tierLocationOf({ tierUrl: 's3://bucket/kv/' })).message).toMatch(/scratchDir \(--scratch-dir\)/);
    expect(refusal(() => tierLocationOf({})).code).toBe('INVALID_ARGUMENT');
    expect(refusal(() => tierLocationOf({ tierDir: '/a', tierUrl: 'file:///a' })).code).toBe('INVALID_ARGUMENT');
    expect(refusal(() => tierLocationOf({ tierUrl: 'https://bucket.example/kv', scratchDir: '/s' })).message).toMatch(
      /s3:\/\/bucket\/prefix/,
    );
  });

  it('opens a file:// tier as a blob store in the directory, and refuses credentials in an s3:// URL', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvfabric-tier-location-'));
    try {
      // The directory as the operator made it, even a mount point anyone may write (its folders are checked by their stores).
      chmodSync(dir, 0o1777);
      const store = await openSharedStore(tierLocationOf({ tierDir: dir }));
      expect(store.location).toBe(`file://${dir}`);
      expect(statSync(dir).mode & 0o7777).toBe(0o1777);
      await store.close();
      await expect(openSharedStore({ url: 's3://key:secret@bucket/kv/', scratchDir: dir })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        message: expect.not.stringContaining('secret'),
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the worker flags of the tier', () => {
  it('reads --tier-url with the S3 server settings and --scratch-dir, flags before the environment', () => {
    const config = parseWorkerConfig(
      ['--tier-url', 's3://bucket/kv', '--scratch-dir', '/var/kv', '--s3-endpoint', 'http://127.0.0.1:8333', '--s3-path-style'],
      { ...env, KVFABRIC_TIER_DIR: '/mnt/ignored', KVFABRIC_S3_REGION: 'eu-west-1' },
    );
    expect(config).toMatchObject({
      tierUrl: 's3://bucket/kv',
      scratchDir: '/var/kv',
      s3: { endpoint: 'http://127.0.0.1:8333', region: 'eu-west-1', forcePathStyle: true },
    });
    expect(config.tierDir).toBeUndefined();
    const fromEnv = parseWorkerConfig([], {
      ...env,
      KVFABRIC_TIER_URL: 's3://bucket/kv',
      KVFABRIC_SCRATCH_DIR: '/var/kv',
      KVFABRIC_S3_PATH_STYLE: '1',
    });
    expect(fromEnv).toMatchObject({ tierUrl: 's3://bucket/kv', scratchDir: '/var/kv', s3: { forcePathStyle: true } });
  });

  it('refuses two tiers, an s3:// tier without a scratch directory, and S3 settings without an s3:// tier', () => {
    expect(() => parseWorkerConfig(['--tier-dir', '/a', '--tier-url', 'file:///a'], env)).toThrow(/give one/);
    expect(() => parseWorkerConfig(['--tier-url', 's3://bucket/kv'], env)).toThrow(/--scratch-dir/);
    expect(() => parseWorkerConfig(['--tier-dir', '/a', '--s3-endpoint', 'http://x'], env)).toThrow(/s3:\/\/ --tier-url/);
    expect(() => parseWorkerConfig([], env)).toThrow(/--tier-dir \(or KVFABRIC_TIER_DIR\) is required, or --tier-url/);
  });
});
