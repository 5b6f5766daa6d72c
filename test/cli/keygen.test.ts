// `kvfabric keygen`: the files it writes (mode 0600, never overwritten without --force), and that the keys
// in them work where they are meant to: the client's issuer signs and a worker's verifier, configured from
// the trusted-key file, accepts; the codec key opens what it sealed; the master key opens the cold store.
// A second set's keys are refused each time, so these checks can fail. (The same files running a real
// worker and client on a dev server: test/worker/worker-process.test.ts.)
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { defaultPayloadConverter } from '@temporalio/common';
import { afterAll, describe, expect, it } from 'vitest';

import { keygen } from '../../src/cli/keygen';
import { clientSecurityFromEnv } from '../../src/client/client-security';
import { CapabilityDenied, CapabilityVerifier } from '../../src/security/capability-verifier';
import { CodecKeyRing, EncryptionCodec } from '../../src/security/payload-codec';
import { ColdStore, KeyRing, type ColdBlockRef } from '../../src/tiers/cold';
import { parseWorkerConfig } from '../../src/worker/config';
import { runCli } from './run-cli';

const FILES = ['signing.keys', 'trusted.keys', 'codec.keys', 'master.keys', 'codec-server.token'];
const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-keygen-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A fresh key set in its own directory, and what it printed. */
function generated(name: string): { dir: string; printed: string } {
  const dir = join(scratch, name);
  const lines: string[] = [];
  keygen(['--out', dir], (line) => lines.push(line));
  return { dir, printed: lines.join('\n') };
}

/** The settings a client and a worker take, pointing at the files of `dir`. */
const clientEnv = (dir: string) => ({
  KVFABRIC_SIGNING_KEYS_FILE: join(dir, 'signing.keys'),
  KVFABRIC_CODEC_KEYS_FILE: join(dir, 'codec.keys'),
});
const workerConfigOf = (dir: string) =>
  parseWorkerConfig(['--tier-dir', join(dir, 'tier'), '--key-file', join(dir, 'master.keys')], {
    KVFABRIC_TRUSTED_KEYS_FILE: join(dir, 'trusted.keys'),
    KVFABRIC_CODEC_KEYS_FILE: join(dir, 'codec.keys'),
  });

describe('kvfabric keygen', () => {
  const first = generated('first');
  const second = generated('second');

  it('writes every key file with mode 0600 in a 0700 directory, and says which setting takes each', () => {
    expect(statSync(first.dir).mode & 0o777).toBe(0o700);
    for (const name of FILES) expect(statSync(join(first.dir, name)).mode & 0o777, name).toBe(0o600);
    for (const setting of [
      'KVFABRIC_SIGNING_KEYS_FILE',
      'KVFABRIC_TRUSTED_KEYS_FILE',
      'KVFABRIC_CODEC_KEYS_FILE',
      '--key-file or KVFABRIC_KEY_FILE',
      'KVFABRIC_CODEC_SERVER_TOKEN_FILE',
    ]) {
      expect(first.printed).toContain(setting);
    }
    for (const name of FILES) expect(first.printed).toContain(join(first.dir, name));
    // Nothing secret on the screen: no key or token bytes.
    for (const name of FILES) {
      const secrets = readFileSync(join(first.dir, name), 'utf8')
        .split('\n')
        .filter((line) => line && !line.startsWith('#'))
        .map((line) => line.slice(line.indexOf('=') + 1));
      for (const secret of secrets) expect(first.printed).not.toContain(secret);
    }
  });

  it('refuses to overwrite a key file, changing none, unless --force, which also resets the mode', () => {
    const before = FILES.map((name) => readFileSync(join(first.dir, name), 'utf8'));
    expect(() => keygen(['--out', first.dir], () => undefined)).toThrow(/already exist: pass --force/);
    expect(FILES.map((name) => readFileSync(join(first.dir, name), 'utf8'))).toEqual(before);

    const forced = join(scratch, 'forced');
    keygen(['--out', forced], () => undefined);
    writeFileSync(join(forced, 'codec.keys'), 'old');
    chmodSync(join(forced, 'codec.keys'), 0o644);
    const old = readFileSync(join(forced, 'signing.keys'), 'utf8');
    keygen(['--out', forced, '--force'], () => undefined);
    expect(readFileSync(join(forced, 'signing.keys'), 'utf8')).not.toBe(old);
    expect(statSync(join(forced, 'codec.keys')).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(forced, 'codec.keys'), 'utf8')).toMatch(/^# .*\ncodec-\d{8}-[0-9a-f]{6}=[A-Za-z0-9+/]{43}=\n$/);
  });

  it("signs with the signing key a worker verifies with the trusted-key file; another set's worker refuses it", () => {
    const { issuer } = clientSecurityFromEnv(clientEnv(first.dir));
    const token = issuer!.mint({ tenant: 'acme', agentId: 'planner', workflowId: 'kvfabric-agent-planner' });
    expect(new CapabilityVerifier(workerConfigOf(first.dir).keys.trusted).verify(token)).toMatchObject({ ten: 'acme', sub: 'planner' });
    expect(() => new CapabilityVerifier(workerConfigOf(second.dir).keys.trusted).verify(token)).toThrow(CapabilityDenied);
  });

  it("decodes in the worker what the client's codec key sealed; another set's key cannot", async () => {
    const sealed = await new EncryptionCodec(clientSecurityFromEnv(clientEnv(first.dir)).codec).encode([
      defaultPayloadConverter.toPayload({ reply: 'Ada' }),
    ]);
    const { codec, activeCodecKeyId } = workerConfigOf(first.dir).keys;
    const [opened] = await new EncryptionCodec(new CodecKeyRing(codec, activeCodecKeyId)).decode(sealed);
    expect(defaultPayloadConverter.fromPayload(opened!)).toEqual({ reply: 'Ada' });
    await expect(new EncryptionCodec(clientSecurityFromEnv(clientEnv(second.dir)).codec).decode(sealed)).rejects.toThrow(
      /which this process does not hold/,
    );
  });

  it("opens the cold store with the master key file: a segment written reads back; another set's ring cannot read it", async () => {
    const config = workerConfigOf(first.dir);
    const directory = join(first.dir, 'tier', 'cold');
    const store = await ColdStore.open({
      directory,
      keyRing: new KeyRing(config.keys.master, config.keys.activeMasterKeyId),
      cryptoThreads: 1,
    });
    const owner = { tenant: 1, contextId: 'planner', version: 1 };
    const block = Buffer.alloc(4096, 7);
    let refs: ColdBlockRef[] = [];
    try {
      refs = await store.writeSegment(owner, [block]);
      expect(Buffer.from((await store.readBlocks(refs, 1))[0]!)).toEqual(block);
    } finally {
      await store.close();
    }
    const other = workerConfigOf(second.dir);
    const stranger = await ColdStore.open({
      directory,
      keyRing: new KeyRing(other.keys.master, other.keys.activeMasterKeyId),
      cryptoThreads: 1,
    });
    try {
      await expect(stranger.readBlocks(refs, 1)).rejects.toThrow();
    } finally {
      await stranger.close();
    }
  });

  it('as a process: exits 0 and prints the table; run again, exits 1 with one line; without --out, exits 2', async () => {
    const dir = join(scratch, 'process');
    const made = await runCli(['keygen', '--out', dir]);
    expect(made).toMatchObject({ code: 0, stderr: '' });
    expect(made.stdout).toContain(`wrote 5 files to ${dir} (mode 0600)`);
    const again = await runCli(['keygen', '--out', dir]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^kvfabric: .*signing\.keys.* already exist: pass --force .*\(INVALID_STATE\)\n$/);
    const bare = await runCli(['keygen']);
    expect(bare).toMatchObject({ code: 2, stderr: 'kvfabric: keygen: --out DIR is required (see kvfabric keygen --help)\n' });
  });
});
