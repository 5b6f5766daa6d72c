// The POSIX directory backend: the shared contract, then what only a directory can get wrong: files
// planted under a key, a key that runs through another, and claims (version-claims.ts) held by a live
// process (waited for) or left by a dead one (passed on, never blocking the key for ever).
import { spawnSync } from 'node:child_process';
import { promises as fsp, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { isPreconditionFailed } from '../../src/blob-store/blob-errors';
import { PosixBlobStore } from '../../src/blob-store/posix/posix-blob-store';
import { HOST_TAG } from '../../src/blob-store/posix/temp-files';
import { claimNameOf, holderLine } from '../../src/blob-store/posix/version-claims';
import { isFabricError } from '../../src/fabric/errors';
import { blobStoreContract } from './blob-store-contract';

const roots: string[] = [];
function freshRoot(): string {
  const root = mkdtempSync(path.join(os.tmpdir(), 'kvfabric-blobs-'));
  roots.push(root);
  return root;
}
afterAll(async () => {
  await Promise.all(roots.map((root) => fsp.rm(root, { recursive: true, force: true })));
});

blobStoreContract('POSIX directory', { open: () => PosixBlobStore.open(freshRoot()), propertyRuns: 60 });

/** A pid that no process has now: one that just exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return Number(child.stdout);
}

describe('POSIX blob store', () => {
  it('refuses a link, a FIFO or a folder planted under a key as INTEGRITY, without following or blocking', async () => {
    const root = freshRoot();
    const store = await PosixBlobStore.open(root);
    await fsp.writeFile(path.join(root, 'secret'), 'not a blob');
    await fsp.symlink(path.join(root, 'secret'), path.join(root, 'link'));
    spawnSync('mkfifo', [path.join(root, 'fifo')]);
    for (const key of ['link', 'fifo']) {
      await expect(store.get(key)).rejects.toMatchObject({ code: 'INTEGRITY' });
      await expect(store.head(key)).rejects.toMatchObject({ code: 'INTEGRITY' });
    }
    await store.put('folder/inner', Buffer.from('x'));
    await expect(store.head('folder')).rejects.toMatchObject({ code: 'INTEGRITY' });
    await fsp.writeFile(path.join(root, 'not a key'), 'foreign');
    // Not listed as blobs either, nor is a file no key can name.
    expect((await store.list('')).map((head) => head.key)).toEqual(['folder/inner', 'secret']);
  });

  it('refuses a key that runs through another blob as INVALID_ARGUMENT, and reads it as absent', async () => {
    const store = await PosixBlobStore.open(freshRoot());
    await store.put('a', Buffer.from('blob'));
    await expect(store.put('a/b', Buffer.from('x'))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(await store.get('a/b')).toBeUndefined();
    expect(await store.head('a/b')).toBeUndefined();
    expect(await store.delete('a/b')).toBe(false);
  });

  it('gives a rewrite of the same bytes a new version, so a stale If-Match cannot pass', async () => {
    const store = await PosixBlobStore.open(freshRoot());
    const v1 = await store.put('k', Buffer.from('same'));
    const v2 = await store.put('k', Buffer.from('same'));
    expect(v2).not.toBe(v1);
    await expect(store.put('k', Buffer.from('late'), { ifMatch: v1 })).rejects.toSatisfy(isPreconditionFailed);
  });

  it("passes on a dead process's claim, and waits for a live one's", async () => {
    const root = freshRoot();
    const store = await PosixBlobStore.open(root);
    const v1 = await store.put('m/x', Buffer.from('one'));
    const claim = path.join(root, 'm', `${claimNameOf('x', v1)}.1`);
    await fsp.writeFile(claim, `${HOST_TAG} ${deadPid()} 1\n`);
    const v2 = await store.put('m/x', Buffer.from('two'), { ifMatch: v1 });
    expect((await store.get('m/x'))?.bytes.toString()).toBe('two');
    // Replaced: the claims of v1 are gone with it.
    expect((await fsp.readdir(path.join(root, 'm'))).filter((name) => name.startsWith('.'))).toEqual([]);

    // This very process as the holder: alive, so the write waits until the claim goes.
    const held = path.join(root, 'm', `${claimNameOf('x', v2)}.1`);
    await fsp.writeFile(held, holderLine());
    let done = false;
    const writing = store.put('m/x', Buffer.from('three'), { ifMatch: v2 }).finally(() => (done = true));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(done).toBe(false);
    await fsp.rm(held);
    const v3 = await writing;
    expect((await store.get('m/x'))?.version).toBe(v3);
  });

  it('opens only a private directory: one that others can write is PERMISSION_DENIED', async () => {
    const root = freshRoot();
    await fsp.chmod(root, 0o777);
    const err = await PosixBlobStore.open(root).catch((e: unknown) => e);
    expect(isFabricError(err, 'PERMISSION_DENIED')).toBe(true);
  });
});
