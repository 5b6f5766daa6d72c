// Connection settings the Temporal way (@temporalio/envconfig): a temporal.toml profile, Temporal's
// environment variables over it, flags over both. Then the CLI reaches a real dev server through nothing but a profile.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { temporalSettings, temporalSettingsFromFlags } from '../../src/client/temporal-settings';
import { parseWorkerConfig } from '../../src/worker/config';
import { startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { keyListText, TEST_CODEC_KEYS, TEST_TRUSTED_KEYS } from '../security/test-keys';

let dir: string;
let configFile: string;
/** No ~/.config/temporalio/temporal.toml of whoever runs the tests. */
let home: Record<string, string>;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-envconfig-'));
  home = { HOME: dir };
  configFile = join(dir, 'temporal.toml');
  writeFileSync(join(dir, 'ca.pem'), 'CA FROM A FILE');
  writeFileSync(
    configFile,
    [
      '[profile.default]',
      'address = "default-host:7233"',
      '',
      '[profile.cloud]',
      'address = "acme.tmprl.cloud:7233"',
      'namespace = "acme.prod"',
      'api_key = "secret-key"',
      '[profile.cloud.tls]',
      'server_name = "acme.tmprl.cloud"',
      'server_ca_cert_data = "CA FROM THE PROFILE"',
      '[profile.cloud.grpc_meta]',
      'tenant-route = "eu"',
      '',
    ].join('\n'),
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('temporal settings', () => {
  it('default to the local dev server in plaintext', () => {
    expect(temporalSettings({}, home)).toEqual({ address: 'localhost:7233', namespace: 'default' });
  });

  it('read a temporal.toml profile: address, namespace, API key (with TLS), server name, CA, gRPC metadata', () => {
    const env = { ...home, TEMPORAL_CONFIG_FILE: configFile };
    expect(temporalSettings({}, env)).toEqual({ address: 'default-host:7233', namespace: 'default' });
    const cloud = temporalSettings({ profile: 'cloud' }, env);
    expect(cloud).toMatchObject({
      address: 'acme.tmprl.cloud:7233',
      namespace: 'acme.prod',
      apiKey: 'secret-key',
      metadata: { 'tenant-route': 'eu' },
    });
    expect(cloud.tls?.serverNameOverride).toBe('acme.tmprl.cloud');
    expect(Buffer.from(cloud.tls!.serverRootCACertificate!).toString()).toBe('CA FROM THE PROFILE');
    // TEMPORAL_PROFILE picks it too.
    expect(temporalSettings({}, { ...env, TEMPORAL_PROFILE: 'cloud' })).toMatchObject({ namespace: 'acme.prod' });
    expect(() => temporalSettings({ profile: 'staging' }, env)).toThrow(/Profile 'staging' not found/);
  });

  it("let Temporal's environment variables override the profile, and flags override both", () => {
    const env = {
      ...home,
      TEMPORAL_CONFIG_FILE: configFile,
      TEMPORAL_PROFILE: 'cloud',
      TEMPORAL_NAMESPACE: 'acme.staging',
      TEMPORAL_API_KEY: 'other-key',
    };
    expect(temporalSettings({}, env)).toMatchObject({ address: 'acme.tmprl.cloud:7233', namespace: 'acme.staging', apiKey: 'other-key' });
    const flagged = temporalSettingsFromFlags(
      { address: 'elsewhere:7233', namespace: 'n', 'tls-ca': join(dir, 'ca.pem'), 'tls-server-name': 'elsewhere' },
      env,
    );
    expect(flagged).toMatchObject({ address: 'elsewhere:7233', namespace: 'n', tls: { serverNameOverride: 'elsewhere' } });
    expect(Buffer.from(flagged.tls!.serverRootCACertificate!).toString()).toBe('CA FROM A FILE');
  });

  it("read Temporal's own TLS variables, and refuse half a client certificate", () => {
    const settings = temporalSettings({}, { ...home, TEMPORAL_TLS: 'true', TEMPORAL_TLS_SERVER_CA_CERT_PATH: join(dir, 'ca.pem') });
    expect(Buffer.from(settings.tls!.serverRootCACertificate!).toString()).toBe('CA FROM A FILE');
    expect(() => temporalSettings({ tlsCert: join(dir, 'ca.pem') }, home)).toThrow(/both a client certificate and its key/);
  });

  it('are what the worker takes too (--profile)', () => {
    const env = {
      ...home,
      TEMPORAL_CONFIG_FILE: configFile,
      KVFABRIC_KEYS: `k=${Buffer.alloc(32).toString('base64')}`,
      KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS),
      KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
    };
    expect(parseWorkerConfig(['--tier-dir', dir, '--profile', 'cloud'], env).temporal).toMatchObject({
      address: 'acme.tmprl.cloud:7233',
      namespace: 'acme.prod',
      apiKey: 'secret-key',
    });
  });
});

describe('the CLI through a profile', () => {
  let server: DevServer;
  beforeAll(async () => {
    server = await startDevServer();
  }, 60_000);
  afterAll(async () => server?.stop());

  it('reaches the dev server named only in temporal.toml', () => {
    const file = join(dir, 'dev.toml');
    writeFileSync(file, `[profile.dev]\naddress = "${server.address}"\nnamespace = "${server.namespace}"\n`);
    const cli = join(__dirname, '..', '..', 'src', 'cli', 'kvfabric.ts');
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ...home,
      TEMPORAL_CONFIG_FILE: file,
      TEMPORAL_PROFILE: 'dev',
      KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
    };
    delete env.TEMPORAL_ADDRESS;
    delete env.TEMPORAL_NAMESPACE;
    const listed = spawnSync(process.execPath, ['--import', 'tsx', cli, 'list', '--json'], { env, encoding: 'utf8', timeout: 60_000 });
    expect(listed.stderr).toBe('');
    expect(JSON.parse(listed.stdout)).toEqual([]);
    // The same call with a profile naming no server fails to connect: the profile is what was used.
    writeFileSync(file, `[profile.dev]\naddress = "127.0.0.1:1"\n`);
    const refused = spawnSync(process.execPath, ['--import', 'tsx', cli, 'list', '--json'], { env, encoding: 'utf8', timeout: 60_000 });
    expect(refused.status).toBe(1);
  }, 120_000);
});
