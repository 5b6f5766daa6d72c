// Every setting that names a key file (*_KEYS_FILE, --key-file / KVFABRIC_KEY_FILE, the codec server's
// token file) refuses a file whose mode exposes it, naming the setting, the path and the fix, and never the
// key. Secrets: nobody but the owner (and, for reading, its group) may have access. The trusted public keys
// may be read by anyone but changed by nobody else: whoever changed them could add a key and mint tokens.
// A symlink is followed to the file it reaches and that file is checked. Real files from `kvfabric keygen`.
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { codecServerTokenFromEnv } from '../../src/cli/codec-server-command';
import { keygen } from '../../src/cli/keygen';
import { clientSecurityFromEnv } from '../../src/client/client-security';
import { FabricError } from '../../src/fabric/errors';
import { parseWorkerConfig } from '../../src/worker/config';

const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-key-readers-'));
const keys = join(scratch, 'keys');
keygen(['--out', keys], () => undefined);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
// Each test loosens one file; the next starts from keygen's 0600 again.
afterEach(() => {
  for (const name of ['signing.keys', 'trusted.keys', 'codec.keys', 'master.keys', 'codec-server.token'])
    chmodSync(join(keys, name), 0o600);
});

const file = (name: string) => join(keys, name);
const workerEnv = { KVFABRIC_TRUSTED_KEYS_FILE: file('trusted.keys'), KVFABRIC_CODEC_KEYS_FILE: file('codec.keys') };
const worker = (argv: string[] = ['--key-file', file('master.keys')], env: NodeJS.ProcessEnv = workerEnv) =>
  parseWorkerConfig(['--tier-dir', join(scratch, 'tier'), ...argv], env);
const client = (
  env: NodeJS.ProcessEnv = { KVFABRIC_SIGNING_KEYS_FILE: file('signing.keys'), KVFABRIC_CODEC_KEYS_FILE: file('codec.keys') },
) => clientSecurityFromEnv(env);

/** The refusal `read` throws: typed, naming setting, path and fix, with no byte of what the file holds. */
function expectRefusal(read: () => unknown, setting: string, path: string, fix: string): void {
  let thrown: unknown;
  try {
    read();
  } catch (err) {
    thrown = err;
  }
  expect(thrown).toBeInstanceOf(FabricError);
  expect(thrown).toMatchObject({ code: 'PERMISSION_DENIED' });
  const message = (thrown as Error).message;
  expect(message.startsWith(`${setting}: ${path} has mode 0`)).toBe(true);
  expect(message.endsWith(`: run ${fix} ${path}`)).toBe(true);
  for (const line of readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l && !l.startsWith('#')))
    expect(message).not.toContain(line.slice(line.indexOf('=') + 1));
}

describe('key files that others can read or change', () => {
  it("reads keygen's files (0600) in the worker, the client and the codec server", () => {
    expect(worker().keys.master).toHaveLength(1);
    expect(client().issuer).toBeDefined();
    expect(codecServerTokenFromEnv({ KVFABRIC_CODEC_SERVER_TOKEN_FILE: file('codec-server.token') })).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });

  it('refuses a master key file others can read, naming --key-file or KVFABRIC_KEY_FILE, whichever named it', () => {
    chmodSync(file('master.keys'), 0o644);
    expectRefusal(() => worker(), '--key-file', file('master.keys'), 'chmod 600');
    expectRefusal(
      () => worker([], { ...workerEnv, KVFABRIC_KEY_FILE: file('master.keys') }),
      'KVFABRIC_KEY_FILE',
      file('master.keys'),
      'chmod 600',
    );
  });

  it.each([
    ['codec.keys', 'KVFABRIC_CODEC_KEYS_FILE', () => client()],
    ['codec.keys', 'KVFABRIC_CODEC_KEYS_FILE', () => worker()],
    ['signing.keys', 'KVFABRIC_SIGNING_KEYS_FILE', () => client()],
    [
      'codec-server.token',
      'KVFABRIC_CODEC_SERVER_TOKEN_FILE',
      () => codecServerTokenFromEnv({ KVFABRIC_CODEC_SERVER_TOKEN_FILE: file('codec-server.token') }),
    ],
  ])('refuses %s readable by others (%s)', (name, setting, read) => {
    for (const mode of [0o644, 0o604, 0o620]) {
      chmodSync(file(name), mode);
      expectRefusal(read, setting, file(name), 'chmod 600');
    }
    chmodSync(file(name), 0o640); // a group may read it: a grant made on purpose
    expect(read).not.toThrow();
  });

  it('lets anyone read the trusted public keys, and refuses them when the group or others can change them', () => {
    chmodSync(file('trusted.keys'), 0o644);
    expect(worker().keys.trusted).toHaveLength(1);
    for (const mode of [0o664, 0o646, 0o666]) {
      chmodSync(file('trusted.keys'), mode);
      expectRefusal(() => worker(), 'KVFABRIC_TRUSTED_KEYS_FILE', file('trusted.keys'), 'chmod go-w');
    }
  });

  it('follows a symlink and checks the file it reaches (secret mounts are links)', () => {
    const link = join(scratch, 'linked-master.keys');
    symlinkSync(file('master.keys'), link);
    expect(worker(['--key-file', link]).keys.master).toEqual(worker().keys.master);
    chmodSync(file('master.keys'), 0o644);
    expectRefusal(() => worker(['--key-file', link]), '--key-file', link, 'chmod 600');
  });

  it('refuses a FIFO or a directory in place of a key file at once, and a missing one by name', () => {
    const fifo = join(scratch, 'fifo.keys');
    execFileSync('mkfifo', ['-m', '600', fifo]);
    // Opening a FIFO for reading would wait for a writer forever: it is refused without a wait.
    const refusal = (read: () => unknown) => {
      try {
        read();
      } catch (err) {
        return err;
      }
      return undefined;
    };
    expect(refusal(() => worker(['--key-file', fifo]))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: `--key-file: ${fifo} is not a regular file`,
    });
    expect(refusal(() => worker(['--key-file', keys]))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: `--key-file: ${keys} is not a regular file`,
    });
    expect(refusal(() => client({ KVFABRIC_CODEC_KEYS_FILE: join(scratch, 'none') }))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: `KVFABRIC_CODEC_KEYS_FILE: cannot read ${join(scratch, 'none')} (ENOENT)`,
    });
  });
});
