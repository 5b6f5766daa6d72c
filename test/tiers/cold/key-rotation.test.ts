// Master-key rotation: new files wrap their data key with the active key, old files still open with any
// key of the ring, and a ring without a file's key fails clearly (PERMISSION_DENIED) without leaking keys.
import fs from 'node:fs';
import { inspect } from 'node:util';

import { afterAll, describe, expect, it } from 'vitest';

import { FabricError } from '../../../src/fabric/errors';
import { KeyRing } from '../../../src/tiers/cold';
import { blocksOf, expectBlocks, expectCode, manifestOf, masterKey, openStore, segmentPath, tempDir } from './helpers';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

describe('key rotation', () => {
  it('reads data of the old and the new key after rotating; a ring without the old key is PERMISSION_DENIED', async () => {
    const dir = tempDir('rotation');
    dirs.push(dir);
    const a = masterKey('key-a');
    const b = masterKey('key-b');
    const ownerA = { tenant: 1, contextId: 'old', version: 1 };
    const ownerB = { tenant: 1, contextId: 'new', version: 1 };

    const store = await openStore(dir, new KeyRing([a], 'key-a'));
    const refsA = await store.writeSegment(ownerA, blocksOf(3, 4096, 1));
    await store.writeManifest(manifestOf(ownerA, refsA, 4096));

    // Rotate: B is active, A stays in the ring for reads.
    store.useKeyRing(new KeyRing([a, b], 'key-b'));
    const refsB = await store.writeSegment(ownerB, blocksOf(2, 4096, 2));
    await store.writeManifest(manifestOf(ownerB, refsB, 4096));
    expect(fs.readFileSync(segmentPath(dir, refsB[0]!.segmentId)).includes(Buffer.from('key-b'))).toBe(true);
    expectBlocks(await store.readBlocks((await store.readManifest('old')).pages, 1), blocksOf(3, 4096, 1));
    expectBlocks(await store.readBlocks((await store.readManifest('new')).pages, 1), blocksOf(2, 4096, 2));
    await store.close();

    // Another process that only has B: new data reads, old data fails clearly, naming the missing key.
    const onlyB = await openStore(dir, new KeyRing([b], 'key-b'));
    expectBlocks(await onlyB.readBlocks((await onlyB.readManifest('new')).pages, 1), blocksOf(2, 4096, 2));
    const err = await expectCode(onlyB.readManifest('old'), 'PERMISSION_DENIED', /context 'old'.*master key 'key-a'.*not in this key ring/);
    const blockErr = await expectCode(onlyB.readBlocks(refsA, 1), 'PERMISSION_DENIED', /context 'old'.*'key-a'/);
    for (const e of [err, blockErr]) {
      for (const key of [a, b]) {
        const text = `${e.message} ${inspect(e)} ${JSON.stringify(e)}`;
        expect(text).not.toContain(key.key.toString('hex'));
        expect(text).not.toContain(key.key.toString('base64'));
      }
    }
    await onlyB.close();
  });

  it('a key of the same id but different bytes is INTEGRITY (the data key does not unwrap)', async () => {
    const dir = tempDir('wrong-key');
    dirs.push(dir);
    const owner = { tenant: 1, contextId: 'c', version: 1 };
    const store = await openStore(dir, new KeyRing([masterKey('k')], 'k'));
    const refs = await store.writeSegment(owner, blocksOf(1, 32, 1));
    await store.writeManifest(manifestOf(owner, refs));
    await store.close();
    const impostor = await openStore(dir, new KeyRing([masterKey('k')], 'k'));
    await expectCode(impostor.readManifest('c'), 'INTEGRITY', /context 'c'.*does not unwrap/);
    await expectCode(impostor.readBlocks(refs, 1), 'INTEGRITY', /context 'c'.*does not unwrap/);
    await impostor.close();
  });
});

describe('KeyRing', () => {
  it('validates keys and the active id without echoing key bytes', () => {
    const good = masterKey('a');
    const cases: Array<[unknown, unknown]> = [
      [[], 'a'],
      [[good], 'b'],
      [[good, { ...masterKey('a') }], 'a'],
      [[{ id: '', key: good.key }], ''],
      [[{ id: 'has space', key: good.key }], 'has space'],
      [[{ id: 'short', key: good.key.subarray(0, 16) }], 'short'],
      [[{ id: 'str', key: 'x'.repeat(32) }], 'str'],
      [[null], 'a'],
      ['nope', 'a'],
    ];
    for (const [keys, active] of cases) {
      let caught: unknown;
      try {
        new KeyRing(keys as never, active as never);
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(FabricError);
      expect((caught as FabricError).code).toBe('INVALID_ARGUMENT');
      expect((caught as FabricError).message).not.toContain(good.key.toString('hex'));
    }
  });

  it('copies key bytes, so later changes to the caller buffer do not change the ring', async () => {
    const dir = tempDir('copy');
    dirs.push(dir);
    const key = masterKey('k');
    const store = await openStore(dir, new KeyRing([key], 'k'));
    const original = Buffer.from(key.key);
    key.key.fill(0);
    const owner = { tenant: 1, contextId: 'c', version: 1 };
    const refs = await store.writeSegment(owner, blocksOf(1, 32, 1));
    await store.close();
    const reader = await openStore(dir, new KeyRing([{ id: 'k', key: original }], 'k'));
    expectBlocks(await reader.readBlocks(refs, 1), blocksOf(1, 32, 1));
    await reader.close();
  });

  it('withActive switches the active key and keeps the others', () => {
    const ring = new KeyRing([masterKey('a'), masterKey('b')], 'a');
    const next = ring.withActive('b');
    expect(next.activeKeyId).toBe('b');
    expect(next.keyIds).toEqual(['a', 'b']);
    expect(ring.activeKeyId).toBe('a');
    expect(() => ring.withActive('c')).toThrow(FabricError);
  });
});
