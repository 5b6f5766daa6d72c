// Attack class: things that are not files in the shared tier directory (issue 38, item 4). A FIFO in
// place of a manifest, a segment, a grant or a tenant id file hung `recover` or admission with no
// timeout (a blocking open waits for a writer forever, and holds one of libuv's four threads); a manifest
// symlinked to /dev/zero was read past 1 GiB. Every reader of the directory now opens with O_NOFOLLOW
// (no link is expected there) and O_NONBLOCK, checks the descriptor is a regular file and caps its size by
// the file's kind before reading (src/blob-store/posix/regular-file.ts): INTEGRITY otherwise, at once.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, constants, mkdtempSync, openSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { EpochStore } from '../../../src/shared-directory/epochs';
import { GrantStore } from '../../../src/shared-directory/grant-store';
import { TenantRegistry } from '../../../src/shared-directory/tenant-registry';
import type { ColdBlockRef, ColdStore } from '../../../src/tiers/cold';
import { blocksOf, manifestOf, manifestPath, masterKey, openStore, ringOf, segmentPath } from '../../tiers/cold/helpers';
import { posixStore, testRecordSeal } from '../../shared-directory/fixtures/test-records';

let scratch: string;
let cold: string;
let store: ColdStore;
let refs: ColdBlockRef[];

const hashed = (contextId: string) => createHash('sha256').update(contextId).digest('hex').slice(0, 40);

/** A FIFO at `path` (coreutils' mkfifo: Node has no mkfifo of its own). */
function mkfifo(path: string): void {
  const made = spawnSync('mkfifo', ['-m', '600', path]);
  if (made.status !== 0) throw new Error(`mkfifo ${path}: ${made.stderr.toString()}`);
}

/** Opening the write end wakes a reader stuck in open(2) on the FIFO, so a hung read does not outlive its test. */
function wakeReaders(fifo: string): void {
  try {
    closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
  } catch {
    // ENXIO: nobody is waiting on it.
  }
}

type Outcome = { settled: 'value'; value: unknown } | { settled: 'error'; error: unknown } | { settled: 'hung' };

/** How the call ends within `ms`: a value, an error, or not at all (hung). */
async function within(call: Promise<unknown>, ms = 1500): Promise<Outcome> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<Outcome>((resolve) => (timer = setTimeout(() => resolve({ settled: 'hung' }), ms)));
  try {
    return await Promise.race([
      call.then(
        (value): Outcome => ({ settled: 'value', value }),
        (error: unknown): Outcome => ({ settled: 'error', error }),
      ),
      hung,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

const integrity = { settled: 'error', error: expect.objectContaining({ code: 'INTEGRITY' }) };

let kept = 0;

/** Puts `replacement` in `file`'s place for `call`, and the file back after (kept outside its folder meanwhile). */
async function inPlaceOf(file: string, replacement: 'fifo' | string, call: () => Promise<unknown>): Promise<Outcome> {
  const aside = join(scratch, `kept-${kept++}`);
  renameSync(file, aside);
  if (replacement === 'fifo') mkfifo(file);
  else symlinkSync(replacement, file);
  try {
    return await within(call());
  } finally {
    if (replacement === 'fifo') wakeReaders(file);
    rmSync(file);
    renameSync(aside, file);
  }
}

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-attack-non-files-'));
  cold = join(scratch, 'cold');
  store = await openStore(cold, ringOf(masterKey('k1')));
  const owner = { tenant: 1, contextId: 'victim', version: 1 };
  refs = await store.writeSegment(owner, blocksOf(2, 4096, 1));
  await store.writeManifest(manifestOf(owner, refs, 4096));
});
afterAll(async () => {
  await store?.close();
  rmSync(scratch, { recursive: true, force: true });
});

describe('attack: a FIFO, a device or a link in place of a file of the shared directory', () => {
  it('a FIFO in place of a manifest: INTEGRITY at once, no hang', async () => {
    expect(await inPlaceOf(manifestPath(cold, 'victim'), 'fifo', () => store.readManifest('victim'))).toMatchObject(integrity);
    await expect(store.readManifest('victim')).resolves.toMatchObject({ contextId: 'victim' });
  });

  it('a manifest symlinked to /dev/zero: INTEGRITY at once, nothing read', async () => {
    expect(await inPlaceOf(manifestPath(cold, 'victim'), '/dev/zero', () => store.readManifest('victim'))).toMatchObject(integrity);
  });

  it('a FIFO in place of a segment: INTEGRITY at once, no hang', async () => {
    const segment = segmentPath(cold, refs[0]!.segmentId);
    expect(await inPlaceOf(segment, 'fifo', () => store.readBlocks(refs, 1))).toMatchObject(integrity);
    await expect(store.readBlocks(refs, 1)).resolves.toHaveLength(2);
  });

  it('a segment symlinked to /dev/zero: INTEGRITY', async () => {
    const segment = segmentPath(cold, refs[0]!.segmentId);
    expect(await inPlaceOf(segment, '/dev/zero', () => store.readBlocks(refs, 1))).toMatchObject(integrity);
  });

  it('a FIFO or a /dev/zero link in place of a grant: INTEGRITY at once', async () => {
    const dir = join(scratch, 'grants');
    const grants = await GrantStore.open(await posixStore(dir), '', testRecordSeal());
    await grants.put({ contextId: 'victim', tenant: 'acme', agentId: 'victim' });
    const file = join(dir, `${hashed('victim')}.grant.json`);
    expect(await inPlaceOf(file, 'fifo', () => grants.get('victim'))).toMatchObject(integrity);
    expect(await inPlaceOf(file, '/dev/zero', () => grants.get('victim'))).toMatchObject(integrity);
    await expect(grants.get('victim')).resolves.toMatchObject({ tenant: 'acme' });
  });

  it('a grant file of 8 MiB: INTEGRITY (records are capped by their kind)', async () => {
    const dir = join(scratch, 'grants-large');
    const grants = await GrantStore.open(await posixStore(dir), '', testRecordSeal());
    writeFileSync(join(dir, `${hashed('victim')}.grant.json`), Buffer.alloc(8 << 20, 0x20), { mode: 0o600 });
    expect(await within(grants.get('victim'))).toMatchObject(integrity);
  });

  it('a FIFO in place of a tenant id file: INTEGRITY at once', async () => {
    const dir = join(scratch, 'tenants');
    const acme = await (await TenantRegistry.open(await posixStore(dir), '', testRecordSeal())).idOf('acme');
    const file = join(dir, acme.toString(16).padStart(8, '0'));
    expect(
      await inPlaceOf(file, 'fifo', async () => (await TenantRegistry.open(await posixStore(dir), '', testRecordSeal())).idOf('acme')),
    ).toMatchObject(integrity);
  });

  it('a FIFO as the greatest epoch entry: INTEGRITY, not an epoch', async () => {
    const dir = join(scratch, 'epochs');
    const epochs = await EpochStore.open(await posixStore(dir), '', testRecordSeal());
    await epochs.raise('victim', 5);
    const entry = join(dir, hashed('victim'), '5');
    // Read by a worker that has not seen the entry yet (one that has knows its value and reads no file).
    const reader = async () => EpochStore.open(await posixStore(dir), '', testRecordSeal());
    expect(await inPlaceOf(entry, 'fifo', async () => (await reader()).minimum('victim'))).toMatchObject(integrity);
    await expect((await reader()).minimum('victim')).resolves.toBe(5);
  });
});
