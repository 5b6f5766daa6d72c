// Attack class: another local user plants a key. Key files are judged the way ssh judges
// authorized_keys: it is not enough that the file's mode keeps others out. A file another user owns, or
// one in a directory (or any directory above it) another user can write, is theirs to change: they add
// their own Ed25519 key to trusted.keys and mint full-rights tokens the workers admit, or swap the master
// and signing keys. A symlink on the way counts like a directory: whoever can re-point it chooses the
// file. Each is refused (PERMISSION_DENIED) naming the setting, the file and what is wrong; the sticky,
// root-owned /tmp above a directory of ours is fine (nobody can rename what is ours in it). Real files from
// `kvfabric keygen`; the cases that chown need root, as the tests run.
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, lchownSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeEach, describe, expect, it } from 'vitest';

import { keygen } from '../../../src/cli/keygen';
import { clientSecurityFromEnv } from '../../../src/client/client-security';
import { parseWorkerConfig } from '../../../src/worker/config';

const ME = process.getuid!();
const ROOT = ME === 0;
/** A neighbour: `nobody` on most systems. */
const STRANGER = 65534;

const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-key-neighbours-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let run = 0;
/** A fresh set of keygen's files (0600 in a 0700 directory) under a fresh directory of ours, per test. */
let base: string;
let keys: string;
beforeEach(() => {
  base = join(scratch, `run-${run++}`);
  mkdirSync(base, { mode: 0o755 });
  keys = join(base, 'keys');
  keygen(['--out', keys], () => undefined);
});

// The trusted keys are the first file read (the master keys inline): the attacks below are on them.
const workerEnv = (dir: string): NodeJS.ProcessEnv => ({
  KVFABRIC_KEYS: `m1=${randomBytes(32).toString('base64')}`,
  KVFABRIC_TRUSTED_KEYS_FILE: join(dir, 'trusted.keys'),
  KVFABRIC_CODEC_KEYS_FILE: join(dir, 'codec.keys'),
});
const worker = (dir = keys, env = workerEnv(dir)) => parseWorkerConfig(['--tier-dir', join(scratch, 'tier')], env);
const client = (dir = keys) =>
  clientSecurityFromEnv({ KVFABRIC_SIGNING_KEYS_FILE: join(dir, 'signing.keys'), KVFABRIC_CODEC_KEYS_FILE: join(dir, 'codec.keys') });

/** A directory like /tmp (1777, ours, or root's where the tests run as root), under this test's base. */
function stickyDirectory(name: string): string {
  const path = join(base, name);
  mkdirSync(path);
  chmodSync(path, 0o1777);
  return path;
}

function refusal(read: () => unknown): Error & { code?: string } {
  try {
    read();
  } catch (err) {
    return err as Error & { code?: string };
  }
  throw new Error('the key file was accepted');
}

describe('attack: a neighbour owns or can change a key file', () => {
  it.skipIf(!ROOT)("trusted.keys owned by another user (mode 0644, so only its owner may write it): refused, the owner's uid named", () => {
    const trusted = join(keys, 'trusted.keys');
    chownSync(trusted, STRANGER, STRANGER);
    chmodSync(trusted, 0o644);
    const err = refusal(() => worker());
    expect(err).toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(err.message).toBe(
      `KVFABRIC_TRUSTED_KEYS_FILE: ${trusted} is owned by uid ${STRANGER}, not by this user (uid ${ME}) or root, ` +
        `so that user can change it: run chown ${ME} ${trusted}`,
    );
  });

  it.skipIf(!ROOT)('master and signing key files another user owns (0600): refused', () => {
    chownSync(join(keys, 'master.keys'), STRANGER, STRANGER);
    const { KVFABRIC_KEYS: _inline, ...fromFile } = workerEnv(keys);
    expect(refusal(() => worker(keys, { ...fromFile, KVFABRIC_KEY_FILE: join(keys, 'master.keys') }))).toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringMatching(new RegExp(`^KVFABRIC_KEY_FILE: ${join(keys, 'master.keys')} is owned by uid ${STRANGER}`)),
    });
    chownSync(join(keys, 'signing.keys'), STRANGER, STRANGER);
    expect(refusal(() => client())).toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringMatching(new RegExp(`^KVFABRIC_SIGNING_KEYS_FILE: ${join(keys, 'signing.keys')} is owned by uid ${STRANGER}`)),
    });
  });

  it.each([
    ['the directory holding the files, 0777', () => keys, 0o777],
    ['the directory holding the files, group-writable 0770', () => keys, 0o770],
    ['a directory above it, 0757', () => base, 0o757],
  ])('a directory others can write (%s): refused, the directory named', (_name, dirOf, mode) => {
    const dir = dirOf();
    chmodSync(dir, mode);
    const trusted = join(keys, 'trusted.keys');
    const err = refusal(() => worker());
    expect(err).toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(err.message).toBe(
      `KVFABRIC_TRUSTED_KEYS_FILE: ${trusted}: the directory ${dir} has mode 0${mode.toString(8)}, ` +
        `so other users can swap what it holds: run chmod go-w ${dir}`,
    );
  });

  it.skipIf(!ROOT)('a directory on the way owned by another user: refused, the directory and its owner named', () => {
    chownSync(keys, STRANGER, STRANGER);
    const err = refusal(() => worker());
    expect(err).toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(err.message).toBe(
      `KVFABRIC_TRUSTED_KEYS_FILE: ${join(keys, 'trusted.keys')}: the directory ${keys} is owned by uid ${STRANGER}, ` +
        `not by this user (uid ${ME}) or root, so that user can swap what it holds: run chown ${ME} ${keys}`,
    );
  });

  it('a symlink to key files in a directory others can write: the target is judged, and refused', () => {
    const link = join(base, 'linked');
    symlinkSync(keys, link);
    expect(worker(link).keys.trusted).toHaveLength(1); // a safe target through a link is fine (secret mounts are links)
    chmodSync(keys, 0o777);
    expect(refusal(() => worker(link))).toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining(`${join(link, 'trusted.keys')}: the directory ${keys} has mode 0777`),
    });
  });

  it('a symlink in a directory others can write (they re-point it at keys of their own): refused', () => {
    const open = join(base, 'open');
    mkdirSync(open, { mode: 0o777 });
    chmodSync(open, 0o777);
    const link = join(open, 'trusted.keys');
    symlinkSync(join(keys, 'trusted.keys'), link);
    expect(refusal(() => worker(keys, { ...workerEnv(keys), KVFABRIC_TRUSTED_KEYS_FILE: link }))).toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining(`${link}: the directory ${open} has mode 0777`),
    });
  });

  it.skipIf(!ROOT)('a symlink another user planted in a sticky directory: refused (its owner may re-point it)', () => {
    const sticky = stickyDirectory('sticky');
    const link = join(sticky, 'keys');
    symlinkSync(keys, link);
    expect(worker(link).keys.trusted).toHaveLength(1); // our own link in a sticky directory: nobody else can move it
    // A link is re-pointed by replacing it; its owner may do that even in a sticky directory.
    const theirs = join(sticky, 'theirs');
    symlinkSync(keys, theirs);
    lchownSync(theirs, STRANGER, STRANGER);
    renameSync(theirs, link);
    expect(refusal(() => worker(link))).toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining(`${join(link, 'trusted.keys')}: the link ${link} is owned by uid ${STRANGER}`),
    });
  });

  it('accepts key files of ours under a sticky directory of root or ours, like /tmp', () => {
    const sticky = stickyDirectory('tmp-like');
    const inside = join(sticky, 'keys');
    renameSync(keys, inside);
    expect(worker(inside).keys.trusted).toHaveLength(1);
    expect(client(inside).issuer).toBeDefined();
  });
});
