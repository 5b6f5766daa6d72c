// A client's settings that name files or hold keys fail as typed errors that name the setting, never as a
// bare ENOENT stack trace: the key files (KVFABRIC_CODEC_KEYS_FILE, KVFABRIC_SIGNING_KEYS_FILE), the TLS
// files (--tls-ca, --tls-cert, --tls-key), a temporal.toml that is not there, malformed or missing keys.
// The CLI prints each as one line, exit 1. Real files in a scratch directory.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { keygen } from '../../src/cli/keygen';
import { clientSecurityFromEnv } from '../../src/client/client-security';
import { temporalSettings } from '../../src/client/temporal-settings';
import { runCli } from '../cli/run-cli';

const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-settings-'));
const keys = join(scratch, 'keys');
keygen(['--out', keys], () => undefined);
const missing = join(scratch, 'no-such-file');
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function thrown(read: () => unknown): unknown {
  try {
    read();
  } catch (err) {
    return err;
  }
  throw new Error('expected a failure');
}

describe('client settings that fail', () => {
  it.each(['KVFABRIC_CODEC_KEYS_FILE', 'KVFABRIC_SIGNING_KEYS_FILE'])(
    '%s naming a missing file: INVALID_ARGUMENT naming the setting and the path',
    (setting) => {
      const env = { KVFABRIC_CODEC_KEYS_FILE: join(keys, 'codec.keys'), [setting]: missing };
      expect(thrown(() => clientSecurityFromEnv(env))).toMatchObject({
        name: 'FabricError',
        code: 'INVALID_ARGUMENT',
        message: `${setting}: cannot read ${missing} (ENOENT)`,
      });
    },
  );

  it('no codec key at all, a malformed one, an active key that is not there: INVALID_ARGUMENT naming the setting', () => {
    expect(thrown(() => clientSecurityFromEnv({}))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(/^no payload codec key: set KVFABRIC_CODEC_KEYS_FILE /),
    });
    expect(thrown(() => clientSecurityFromEnv({ KVFABRIC_CODEC_KEYS: 'k1=notbase64ofthirtytwobytes' }))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(/^KVFABRIC_CODEC_KEYS: key 1 \('k1'\) must be 32 bytes/),
    });
    const env = { KVFABRIC_CODEC_KEYS_FILE: join(keys, 'codec.keys'), KVFABRIC_CODEC_ACTIVE_KEY: 'gone' };
    expect(thrown(() => clientSecurityFromEnv(env))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: "KVFABRIC_CODEC_ACTIVE_KEY: 'gone' is not among the payload codec keys given",
    });
    expect(
      thrown(() => clientSecurityFromEnv({ ...env, KVFABRIC_CODEC_ACTIVE_KEY: undefined, KVFABRIC_CAPABILITY_LIFETIME_S: '1.5' })),
    ).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: "KVFABRIC_CAPABILITY_LIFETIME_S must be a positive integer (seconds), got '1.5'",
    });
  });

  it.each([
    ['--tls-ca', { tlsCa: missing }],
    ['--tls-cert', { tlsCert: missing, tlsKey: join(keys, 'codec.keys') }],
    ['--tls-key', { tlsCert: join(keys, 'trusted.keys'), tlsKey: missing }],
  ])('%s naming a missing file: INVALID_ARGUMENT naming the flag and the path', (flag, flags) => {
    expect(thrown(() => temporalSettings(flags, {}))).toMatchObject({
      name: 'FabricError',
      code: 'INVALID_ARGUMENT',
      message: `${flag}: cannot read ${missing} (ENOENT)`,
    });
  });

  it('a temporal.toml that is not there, or does not parse: INVALID_ARGUMENT naming where it came from', () => {
    // Named on purpose and not there: not a silent fall back to localhost.
    expect(thrown(() => temporalSettings({}, { TEMPORAL_CONFIG_FILE: missing }))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: `TEMPORAL_CONFIG_FILE: cannot read ${missing} (ENOENT)`,
    });
    const broken = join(scratch, 'broken.toml');
    writeFileSync(broken, '[profile.default\naddress = ');
    expect(thrown(() => temporalSettings({ profile: 'default' }, { TEMPORAL_CONFIG_FILE: broken }))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(new RegExp(`^Temporal connection settings \\(--profile default, TEMPORAL_CONFIG_FILE=${broken}\\): `)),
    });
  });

  it('the CLI prints a missing key file as one line naming the setting, exit 1, no stack trace', async () => {
    const run = await runCli(['list', '--address', '127.0.0.1:1'], { KVFABRIC_CODEC_KEYS_FILE: missing });
    expect(run).toMatchObject({ code: 1, stdout: '' });
    expect(run.stderr).toBe(`kvfabric: KVFABRIC_CODEC_KEYS_FILE: cannot read ${missing} (ENOENT) (INVALID_ARGUMENT)\n`);
  });
});
