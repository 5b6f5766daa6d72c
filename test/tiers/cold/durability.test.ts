// Crash safety and storage failures: a writer killed mid-write leaves the old state or the new one; open()
// removes the temp files of dead writers; a full disk is STORAGE_FULL with prior data intact and no temp
// file left; other I/O failures are UNAVAILABLE. Real processes, real files, a real tmpfs.
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FabricError } from '../../../src/fabric/errors';
import { ioError } from '../../../src/blob-store/posix/io-errors';
import { KeyRing } from '../../../src/tiers/cold';
import {
  blocksOf,
  CRASH_BLOCK_BYTES,
  CRASH_BLOCKS,
  expectBlocks,
  expectCode,
  filesUnder,
  manifestOf,
  masterKey,
  openStore,
  ringOf,
  tempDir,
} from './helpers';

const REPO = path.resolve(__dirname, '../../..');
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});
const tempFiles = (dir: string) => filesUnder(dir).filter((f) => path.basename(f).startsWith('.tmp-'));
const HOST_TAG = createHash('sha256').update(os.hostname()).digest('hex').slice(0, 8);

describe('crash safety', () => {
  it('a writer killed mid-write leaves a complete, readable latest version and no temp files after open', async () => {
    const dir = tempDir('crash');
    dirs.push(dir);
    const key = randomBytes(32);
    const manifests = path.join(dir, 'manifests');
    // Round 1 kills a while after the first durable version (usually inside a segment write); round 2
    // kills the moment a manifest temp file appears (inside a manifest write).
    for (const strategy of ['after-delay', 'in-manifest-write'] as const) {
      const child = spawn(process.execPath, ['--import', 'tsx', 'test/tiers/cold/fixtures/crash-writer.ts'], {
        cwd: REPO,
        env: { ...process.env, COLD_DIR: dir, COLD_KEY_HEX: key.toString('hex') },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let durable = 0;
      const killInManifestWrite = () => {
        const deadline = Date.now() + 5000;
        while (Date.now() < deadline && !fs.readdirSync(manifests).some((name) => name.startsWith('.tmp-')));
        child.kill('SIGKILL');
      };
      await new Promise<void>((resolve, reject) => {
        child.once('error', reject);
        child.stdout.on('data', (chunk: Buffer) => {
          if (durable === 0) {
            if (strategy === 'after-delay') setTimeout(() => child.kill('SIGKILL'), 60);
            else setImmediate(killInManifestWrite);
          }
          durable = Math.max(durable, Number(chunk.toString().trim().split('\n').pop()));
        });
        child.once('exit', () => resolve());
      });
      expect(durable, 'the writer made progress before the kill').toBeGreaterThan(0);

      const store = await openStore(dir, new KeyRing([{ id: 'crash', key }], 'crash'));
      expect(tempFiles(dir), 'open() removed the dead writer temp files').toEqual([]);
      const manifest = await store.readManifest('crashy', { minVersion: durable });
      // Never older than what the writer reported durable; at most the one it finished before dying.
      expect(manifest.version).toBeLessThanOrEqual(durable + 1);
      expectBlocks(await store.readBlocks(manifest.pages, 3), blocksOf(CRASH_BLOCKS, CRASH_BLOCK_BYTES, manifest.version));
      // Every other segment is an orphan of an older version or of the write the kill interrupted.
      const orphans = await store.orphanSegments();
      expect(orphans).not.toContain(manifest.pages[0]!.segmentId);
      for (const id of orphans) await store.deleteSegment(id);
      expect(await store.listSegments()).toEqual([manifest.pages[0]!.segmentId]);
      await store.close();
    }
  }, 30_000);

  it('open() removes temp files of dead writers and old ones, and keeps those of live writers', async () => {
    const dir = tempDir('temps');
    dirs.push(dir);
    await (await openStore(dir, ringOf(masterKey('k')))).close();
    const deadPid = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout;
    const hourAgo = new Date(Date.now() - 2 * 60 * 60 * 1000);
    const make = (folder: string, name: string, old = false) => {
      const file = path.join(dir, folder, name);
      fs.writeFileSync(file, 'partial');
      if (old) fs.utimesSync(file, hourAgo, hourAgo);
      return `${folder}/${name}`;
    };
    const dead = make('segments', `.tmp-${HOST_TAG}-${deadPid}-aa11`);
    const deadManifest = make('manifests', `.tmp-${HOST_TAG}-${deadPid}-bb22`);
    const oldForeign = make('segments', `.tmp-0badc0de-123-cc33`, true);
    const liveHere = make('segments', `.tmp-${HOST_TAG}-${process.ppid}-dd44`);
    const recentForeign = make('manifests', `.tmp-0badc0de-123-ee55`);
    const store = await openStore(dir, ringOf(masterKey('k')));
    expect(tempFiles(dir).sort()).toEqual([liveHere, recentForeign].sort());
    expect(tempFiles(dir)).not.toContain(dead);
    expect(tempFiles(dir)).not.toContain(deadManifest);
    expect(tempFiles(dir)).not.toContain(oldForeign);
    // Temp files are invisible to listings.
    expect(await store.listSegments()).toEqual([]);
    expect(await store.listManifests()).toEqual([]);
    await store.close();
    // With a zero age limit every temp file of another writer is stale.
    await (await openStore(dir, ringOf(masterKey('k')), { staleTempAgeMs: 0 })).close();
    expect(tempFiles(dir)).toEqual([]);
  });
});

describe('full disk', () => {
  let mountPoint = '';
  let mounted = false;
  let why = '';
  beforeAll(() => {
    mountPoint = tempDir('full');
    dirs.push(mountPoint);
    const mount = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', mountPoint], { encoding: 'utf8' });
    mounted = mount.status === 0;
    why = mount.error?.message ?? mount.stderr.trim();
  });
  afterAll(() => {
    if (mounted) spawnSync('umount', [mountPoint]);
  });

  it('is STORAGE_FULL for segments and manifests, removes the temp file and keeps prior data readable', async (ctx) => {
    if (!mounted) {
      console.warn(`skipping the full-disk test: cannot mount a 256 KiB tmpfs (${why}); needs root`);
      ctx.skip();
    }
    const dir = path.join(mountPoint, 'cold');
    const store = await openStore(dir, ringOf(masterKey('k')));
    const owner = { tenant: 1, contextId: 'kept', version: 1 };
    const blocks = blocksOf(8, 4096, 1);
    const refs = await store.writeSegment(owner, blocks);
    await store.writeManifest(manifestOf(owner, refs, 4096));
    const before = filesUnder(dir);

    await expectCode(
      store.writeSegment({ ...owner, version: 2 }, blocksOf(64, 4096, 2)),
      'STORAGE_FULL',
      /segment .* of context 'kept'.*full \(ENOSPC\)/,
    );
    expect(filesUnder(dir)).toEqual(before);

    // A manifest too big for what is left: 3000 pages of JSON.
    const big = manifestOf(
      { ...owner, version: 2 },
      Array.from({ length: 3000 }, (_, i) => refs[i % refs.length]!),
      4096,
    );
    await expectCode(store.writeManifest(big), 'STORAGE_FULL', /manifest of context 'kept'/);
    expect(filesUnder(dir)).toEqual(before);

    const manifest = await store.readManifest('kept');
    expect(manifest.version).toBe(1);
    expectBlocks(await store.readBlocks(manifest.pages, 1), blocks);
    // Space freed: writing works again.
    await store.deleteManifest('kept');
    await store.deleteSegment(refs[0]!.segmentId);
    const again = await store.writeSegment({ ...owner, version: 3 }, blocksOf(32, 4096, 3));
    expectBlocks(await store.readBlocks(again, 1), blocksOf(32, 4096, 3));
    await store.close();
  });

  it('maps ENOSPC and EDQUOT to STORAGE_FULL and other errors to UNAVAILABLE', () => {
    const errno = (code: string) => Object.assign(new Error(`${code}: failed`), { code });
    expect(ioError(errno('ENOSPC'), 'writing x').code).toBe('STORAGE_FULL');
    expect(ioError(errno('EDQUOT'), 'writing x').code).toBe('STORAGE_FULL');
    expect(ioError(errno('EIO'), 'writing x').code).toBe('UNAVAILABLE');
    expect(ioError(errno('EIO'), 'writing x').message).toMatch(/writing x: .*EIO/);
    const own = new FabricError('INTEGRITY', 'kept');
    expect(ioError(own, 'x')).toBe(own);
  });
});

describe('other storage failures', () => {
  it('a broken directory is UNAVAILABLE, not a crash', async () => {
    const dir = tempDir('broken');
    dirs.push(dir);
    const store = await openStore(dir, ringOf(masterKey('k')));
    const owner = { tenant: 1, contextId: 'a', version: 1 };
    const refs = await store.writeSegment(owner, blocksOf(2, 32, 1));
    fs.rmSync(path.join(dir, 'segments'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'segments'), 'not a directory');
    await expectCode(store.writeSegment(owner, blocksOf(2, 32, 1)), 'UNAVAILABLE', /ENOTDIR/);
    await expectCode(store.readBlocks(refs, 1), 'UNAVAILABLE', /context 'a'.*ENOTDIR/);
    await expectCode(store.listSegments(), 'UNAVAILABLE');
    await store.close();
    await expectCode(openStore(path.join(dir, 'segments', 'below-a-file'), ringOf(masterKey('k'))), 'UNAVAILABLE');
  });
});
