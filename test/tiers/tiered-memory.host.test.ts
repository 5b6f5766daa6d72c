// TieredMemory between the device and host tiers: byte-exact moves, fork sharing across tiers, LRU
// eviction under pressure, pins, background demotion and concurrent moves.
import { afterEach, describe, expect, it } from 'vitest';

import { FabricError, NativeAllocator } from '../../src/fabric';
import { TieredMemory } from '../../src/tiers/tiered-memory';
import { expectSameBytes, tinyShape, tokenBytes } from '../fabric/implementations';

let pool: NativeAllocator | undefined;
afterEach(() => pool?.close());

function open(blockCount: number, hostBlockCount: number, extra: Partial<ConstructorParameters<typeof TieredMemory>[0]> = {}) {
  pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount, hostBlockCount });
  return { pool, memory: new TieredMemory({ pool, deviceLowWatermark: 0, hostLowWatermark: 0, ...extra }) };
}

describe('TieredMemory across device and host', () => {
  it('demotes to host and promotes byte-exact, with accounting back to baseline', async () => {
    const { pool, memory } = open(8, 8);
    memory.create('a', 1);
    await memory.append('a', tokenBytes(10, 1));
    await memory.demote('a', 'host');
    expect(memory.residency('a')).toBe('host');
    expect(pool.stats()).toMatchObject({ usedBlocks: 0, host: { usedBlocks: 3 } });
    expectSameBytes(await memory.read('a', 0, 10), tokenBytes(10, 1)); // readable from host
    await memory.promote('a');
    expect(memory.residency('a')).toBe('device');
    expect(pool.stats()).toMatchObject({ usedBlocks: 3, host: { usedBlocks: 0 } });
    expectSameBytes(await memory.read('a', 0, 10), tokenBytes(10, 1));
    await memory.release('a');
    expect(pool.stats()).toMatchObject({ usedBlocks: 0, host: { usedBlocks: 0 }, contexts: 0 });
  });

  it('moves blocks shared by forks once and keeps them shared when they come back', async () => {
    const { pool, memory } = open(16, 16);
    memory.create('parent', 1);
    await memory.append('parent', tokenBytes(8, 1));
    await memory.fork('parent', 'child');
    await memory.append('child', tokenBytes(4, 2));
    await memory.demote('parent', 'host');
    expect(pool.stats()).toMatchObject({ usedBlocks: 3, host: { usedBlocks: 0 } }); // the child still uses the prefix
    await memory.demote('child', 'host');
    expect(pool.stats()).toMatchObject({ usedBlocks: 0, host: { usedBlocks: 3 }, sharedBlocks: 2 });
    await memory.promote('child');
    expect(pool.stats()).toMatchObject({ usedBlocks: 3, host: { usedBlocks: 0 }, sharedBlocks: 2 });
    expect(memory.residency('parent')).toBe('device'); // offloaded, but its pages came back with the child's
    await memory.promote('parent');
    expect(pool.stats()).toMatchObject({ usedBlocks: 3, sharedBlocks: 2 });
    expectSameBytes(await memory.read('parent', 0, 8), tokenBytes(8, 1));
    expectSameBytes(await memory.read('child', 0, 12), Buffer.concat([tokenBytes(8, 1), tokenBytes(4, 2)]));
  });

  it('demotes the least recently used unpinned context when an append needs room', async () => {
    const { pool, memory } = open(4, 8);
    for (const id of ['old', 'pinned', 'recent']) memory.create(id, 1);
    await memory.append('old', tokenBytes(4, 1));
    await memory.append('pinned', tokenBytes(4, 2));
    memory.pin('pinned');
    await memory.append('recent', tokenBytes(4, 3));
    memory.create('new', 2);
    await memory.append('new', tokenBytes(8, 4)); // needs 2 blocks, 1 free
    expect(memory.residency('old')).toBe('host');
    expect(memory.residency('pinned')).toBe('device');
    expect(memory.residency('new')).toBe('device');
    expect(pool.stats().freeBlocks).toBe(0);
    // The next append evicts 'recent'; after that only pinned or busy contexts remain.
    await memory.append('new', tokenBytes(4, 5));
    expect(memory.residency('recent')).toBe('host');
    await expect(memory.append('new', tokenBytes(8, 6))).rejects.toMatchObject({ code: 'POOL_EXHAUSTED' });
    expect(memory.contextStats('new').tokens).toBe(12);
    // An offloaded context comes back by evicting others; its bytes are intact.
    memory.unpin('pinned');
    expectSameBytes(await memory.read('old', 0, 4), tokenBytes(4, 1));
    await memory.append('old', tokenBytes(1, 7));
    expect(memory.residency('old')).toBe('device');
    expectSameBytes(await memory.read('old', 0, 5), Buffer.concat([tokenBytes(4, 1), tokenBytes(1, 7)]));
  });

  it('reports what each move did and every eviction it caused, and tells listeners too', async () => {
    const { pool, memory } = open(4, 8);
    const heard: string[] = [];
    memory.onEviction((e) => heard.push(`${e.contextId}:${e.from}->${e.to}:${e.bytes}`));
    const blockBytes = pool.layout.blockBytes;
    memory.create('a', 1);
    memory.create('b', 1);
    await memory.append('a', tokenBytes(8, 1)); // 2 of 4 blocks
    expect(await memory.demote('a', 'host')).toEqual({ from: 'device', to: 'host', bytes: 2 * blockBytes, evictions: [] });
    await memory.append('b', tokenBytes(16, 2)); // all 4 blocks; 'a' is already off the device
    const restored = await memory.promote('a'); // needs 2 of 0 free: 'b' makes room
    expect(restored).toEqual({
      from: 'host',
      to: 'device',
      bytes: 2 * blockBytes,
      evictions: [{ contextId: 'b', from: 'device', to: 'host', bytes: 4 * blockBytes }],
    });
    expect(heard).toEqual([`b:device->host:${4 * blockBytes}`]);
    expect(await memory.promote('a')).toEqual({ from: 'device', to: 'device', bytes: 0, evictions: [] });
  });

  it('demotes in the background when free device blocks fall below the low watermark', async () => {
    const { pool, memory } = open(10, 10, { deviceLowWatermark: 0.3, deviceHighWatermark: 0.5 });
    const heard: string[] = [];
    memory.onEviction((e) => heard.push(`${e.contextId}:${e.from}->${e.to}`));
    for (let i = 0; i < 4; i++) {
      memory.create(`c${i}`, 1);
      await memory.append(`c${i}`, tokenBytes(8, i)); // 2 blocks each
    }
    await memory.idle();
    expect(pool.stats().freeBlocks).toBeGreaterThanOrEqual(5);
    expect(memory.residency('c0')).toBe('host'); // oldest first
    expect(memory.residency('c3')).toBe('device');
    expect(heard[0]).toBe('c0:device->host'); // background evictions reach the listeners too
  });

  it('refuses to demote when the host tier is full and there is no disk tier, changing nothing', async () => {
    const { pool, memory } = open(4, 1);
    memory.create('a', 1);
    await memory.append('a', tokenBytes(8, 1));
    await expect(memory.demote('a', 'host')).rejects.toBeInstanceOf(FabricError);
    expect(memory.residency('a')).toBe('device');
    expect(pool.stats()).toMatchObject({ usedBlocks: 2, host: { usedBlocks: 0 } });
    await expect(memory.demote('a', 'disk')).rejects.toMatchObject({ code: 'POOL_EXHAUSTED' });
  });

  it('moves many contexts in both directions at once and returns to baseline', async () => {
    const { pool, memory } = open(256, 256);
    const ids = Array.from({ length: 24 }, (_, i) => `ctx${i}`);
    for (const [i, id] of ids.entries()) {
      memory.create(id, 1 + (i % 3));
      await memory.append(id, tokenBytes(13 + i, i));
    }
    const half = ids.slice(0, 12);
    await Promise.all(half.map((id) => memory.demote(id, 'host')));
    // Promote the first half while demoting the second half.
    await Promise.all([...half.map((id) => memory.promote(id)), ...ids.slice(12).map((id) => memory.demote(id, 'host'))]);
    for (const [i, id] of ids.entries()) expectSameBytes(await memory.read(id, 0, 13 + i), tokenBytes(13 + i, i));
    await Promise.all(ids.map((id) => memory.release(id)));
    expect(pool.stats()).toMatchObject({ usedBlocks: 0, host: { usedBlocks: 0 }, contexts: 0, sharedBlocks: 0 });
  });

  it('rejects unknown and duplicate context ids with typed errors', async () => {
    const { memory } = open(4, 4);
    memory.create('a', 1);
    expect(() => memory.create('a', 1)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => memory.create('', 1)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    await expect(memory.promote('nope')).rejects.toMatchObject({ code: 'STALE_HANDLE' });
    await expect(memory.fork('a', 'a')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(memory.recover('b')).rejects.toMatchObject({ code: 'INVALID_STATE' });
  });
});
