// The worker's flags and environment, parsed and checked before anything starts.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { inspect } from 'node:util';

import { describe, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric/errors';
import { parseWorkerConfig, WORKER_FLAGS, WORKER_USAGE } from '../../src/worker/config';
import { WorkerConfigError } from '../../src/worker/config-error';
import { MODELS } from '../../src/engines/models';
import { TEST_CODEC_KEYS, TEST_TRUSTED_KEYS, keyListText } from '../security/test-keys';

describe('worker configuration', () => {
  const key = randomBytes(32).toString('base64');
  it('reads flags before the environment and keys only from the environment or a file', () => {
    const security = { KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS), KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS) };
    const config = parseWorkerConfig(
      ['--tier-dir', '/tmp/t', '--model', 'tiny', '--device-blocks', '64', '--backend', 'cpu', '--no-workflows'],
      {
        ...security,
        KVFABRIC_KEYS: `k1=${key}`,
        TEMPORAL_ADDRESS: 'temporal:7233',
        KVFABRIC_HOST_BLOCKS: '32',
      },
    );
    expect(config).toMatchObject({
      tierDir: '/tmp/t',
      pool: { deviceBlocks: 64, hostBlocks: 32, backend: 'cpu' },
      workflows: false,
      keys: { activeMasterKeyId: 'k1', activeCodecKeyId: 'test-codec-1' },
    });
    expect(config.keys.trusted.map((k) => k.id)).toEqual(['test-sign-1']);
    expect(() =>
      parseWorkerConfig(['--tier-dir', '/tmp/t'], { KVFABRIC_KEYS: `k1=${key}`, KVFABRIC_CODEC_KEYS: security.KVFABRIC_CODEC_KEYS }),
    ).toThrow(/KVFABRIC_TRUSTED_KEYS/);
    expect(() =>
      parseWorkerConfig(['--tier-dir', '/tmp/t'], { KVFABRIC_KEYS: `k1=${key}`, KVFABRIC_TRUSTED_KEYS: security.KVFABRIC_TRUSTED_KEYS }),
    ).toThrow(/KVFABRIC_CODEC_KEYS/);
    expect(config.temporal).toEqual({ address: 'temporal:7233', namespace: 'default' });
    expect(config.engine.model).toBe(MODELS.tiny);
    expect(config.engine).not.toHaveProperty('batchSize'); // llama.cpp's own default
    const exact = parseWorkerConfig(['--tier-dir', '/tmp/t'], {
      ...security,
      KVFABRIC_KEYS: `k1=${key}`,
      KVFABRIC_ENGINE_BATCH_SIZE: '32',
    });
    expect(exact.engine.batchSize).toBe(32);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t'], {})).toThrow(/no master key/);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t', '--backend', 'tpu'], { KVFABRIC_KEYS: `k1=${key}` })).toThrow(/backend/);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t'], { KVFABRIC_KEYS: 'k1=c2hvcnQ=' })).toThrow(/32 bytes/);
    expect(() => parseWorkerConfig(['--key', key], {})).toThrow();
  });

  it('names the bad setting in a typed error that prints as one line, with no stack trace', () => {
    const env = {
      KVFABRIC_KEYS: `k1=${key}`,
      KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
      KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
    };
    const cases: Array<[argv: string[], env: NodeJS.ProcessEnv, names: RegExp, code: string]> = [
      [[], env, /--tier-dir \(or KVFABRIC_TIER_DIR\) is required/, 'INVALID_ARGUMENT'],
      [['--tier-dir', '/tmp/t', '--backend', 'tpu'], env, /--backend must be/, 'INVALID_ARGUMENT'],
      [['--tier-dir', '/tmp/t', '--frobnicate'], env, /--frobnicate/, 'INVALID_ARGUMENT'],
      [['--tier-dir', '/tmp/t', '--engine-batch-size', '0'], env, /--engine-batch-size must be a whole number >= 1/, 'INVALID_ARGUMENT'],
      [
        ['--tier-dir', '/tmp/t', '--key-file', '/nonexistent/master.keys'],
        { ...env, KVFABRIC_KEYS: undefined },
        /--key-file.*\/nonexistent\/master\.keys/,
        'INVALID_ARGUMENT',
      ],
    ];
    for (const [argv, environment, names, code] of cases) {
      const err = (() => {
        try {
          parseWorkerConfig(argv, environment);
        } catch (thrown) {
          return thrown;
        }
        throw new Error(`${argv.join(' ')} was accepted`);
      })();
      expect(err).toBeInstanceOf(WorkerConfigError);
      expect(err).toBeInstanceOf(FabricError);
      expect((err as FabricError).code).toBe(code);
      expect((err as Error).message).toMatch(names);
      // What `console.error(err)` prints, as the README's worker does: one line, the setting in it.
      const printed = inspect(err);
      expect(printed).not.toContain('\n');
      expect(printed).toMatch(names);
    }
  });

  it('sweeps orphan segments every 10 minutes, taking those an hour old, unless told otherwise', () => {
    const env = {
      KVFABRIC_KEYS: `k1=${key}`,
      KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
      KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
    };
    expect(parseWorkerConfig(['--tier-dir', '/tmp/t'], env).chores).toEqual({ housekeepingMs: 600_000, orphanMinAgeMs: 3_600_000 });
    expect(parseWorkerConfig(['--tier-dir', '/tmp/t', '--housekeeping-ms', '0', '--orphan-min-age-ms', '5000'], env).chores).toEqual({
      housekeepingMs: 0,
      orphanMinAgeMs: 5000,
    });
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t', '--orphan-min-age-ms', 'soon'], env)).toThrow(
      /--orphan-min-age-ms must be a whole number >= 0, got 'soon'/,
    );
    expect(parseWorkerConfig(['--tier-dir', '/tmp/t', '--prefix-idle-ms', '0'], env).chores.prefixIdleMs).toBe(0);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t', '--prefix-idle-ms', 'later'], env)).toThrow(
      /--prefix-idle-ms must be a whole number >= 0/,
    );
  });

  it('takes tenant quota shares from flags before the environment, leaving the rest to the defaults', () => {
    const env = {
      KVFABRIC_KEYS: `k1=${key}`,
      KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
      KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
    };
    expect(parseWorkerConfig(['--tier-dir', '/tmp/t'], env).pool.quotas).toBeUndefined();
    const config = parseWorkerConfig(['--tier-dir', '/tmp/t', '--tenant-pinned-share', '0.25'], {
      ...env,
      KVFABRIC_TENANT_PINNED_SHARE: '0.9',
      KVFABRIC_TENANT_DEVICE_SHARE: '1',
    });
    expect(config.pool.quotas).toEqual({ device: 1, pinned: 0.25 });
    for (const bad of ['0', '1.5', 'half']) {
      expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t', '--tenant-host-share', bad], env)).toThrow(
        `--tenant-host-share must be a number in (0, 1], got '${bad}'`,
      );
    }
    expect(WORKER_USAGE).toMatch(/--tenant-device-share f .*--tenant-host-share f[\s\S]*--tenant-pinned-share f/);
  });
});

describe('the usage text', () => {
  it('names every flag the parser takes, and no flag it does not', () => {
    const parsed = Object.keys(WORKER_FLAGS)
      .map((name) => `--${name}`)
      .sort();
    const named = [...new Set(WORKER_USAGE.match(/--[a-z][a-z0-9-]*/g))].filter((flag) => flag !== '--help').sort();
    expect(named).toEqual(parsed);
  });

  it("lists the flags under the plugin options' groups: pool, engine, keys, chores", () => {
    const env = {
      KVFABRIC_KEYS: `k1=${randomBytes(32).toString('base64')}`,
      KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
      KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
    };
    const config = parseWorkerConfig(['--tier-dir', '/tmp/t'], env);
    for (const [group, heading] of [
      ['pool', 'Pool'],
      ['engine', 'Engine'],
      ['keys', 'Keys'],
      ['chores', 'Chores'],
    ] as const) {
      expect(config[group]).toBeTypeOf('object');
      expect(WORKER_USAGE).toMatch(new RegExp(`^${heading}: `, 'm'));
    }
  });

  it('names every KVFABRIC_ variable the settings read', () => {
    const source = readFileSync(join(__dirname, '../../src/worker/config.ts'), 'utf8');
    const read = [...new Set(source.match(/env\.KVFABRIC_[A-Z0-9_]+/g))].map((name) => name.slice('env.'.length));
    expect(read.length).toBeGreaterThan(10);
    expect(read.filter((name) => !WORKER_USAGE.includes(name))).toEqual([]);
  });
});
