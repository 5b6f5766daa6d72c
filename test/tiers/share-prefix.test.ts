// TieredMemory.sharePrefix: an empty context takes a holder's first full blocks by reference (a prefix
// fork), copy on write, from a holder on the device or in host memory; never another tenant's, never into
// a context that holds anything or is pinned, never past the holder's full blocks.
import { afterEach, describe, expect, it } from 'vitest';

import { NativeAllocator } from '../../src/fabric';
import { TieredMemory } from '../../src/tiers/tiered-memory';
import { expectSameBytes, TINY_BYTES_PER_TOKEN, tinyShape, tokenBytes } from '../fabric/implementations';

let pool: NativeAllocator | undefined;
afterEach(() => pool?.close());

function open() {
  pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 16, hostBlockCount: 16 });
  return { pool, memory: new TieredMemory({ pool, deviceLowWatermark: 0, hostLowWatermark: 0 }) };
}

describe('TieredMemory.sharePrefix', () => {
  it('shares the first full blocks only, copies on write, and frees them with their last holder', async () => {
    const { pool, memory } = open();
    memory.create('holder', 1);
    await memory.append('holder', tokenBytes(10, 1));
    await memory.demote('holder', 'host');
    memory.create('agent', 1);
    await memory.sharePrefix('agent', 'holder', 2, { note: 'prefix' });
    expect(memory.contextStats('agent')).toMatchObject({ tokens: 8, blocks: 2, sharedBlocks: 2 });
    expect(memory.attachment('agent')).toEqual({ note: 'prefix' });
    await memory.append('agent', tokenBytes(3, 50));
    expectSameBytes(await memory.read('agent', 0, 8), tokenBytes(10, 1).subarray(0, 8 * TINY_BYTES_PER_TOKEN));
    expectSameBytes(await memory.read('holder', 0, 10), tokenBytes(10, 1));
    await memory.release('holder');
    expect(memory.contextStats('agent').sharedBlocks).toBe(0);
    await memory.release('agent');
    expect(pool.stats()).toMatchObject({ usedBlocks: 0, host: { usedBlocks: 0 }, contexts: 0 });
  });

  it('refuses another tenant, a context that is not empty or is pinned, and blocks that are not full', async () => {
    const { pool, memory } = open();
    memory.create('holder', 1);
    await memory.append('holder', tokenBytes(10, 1));
    memory.create('stranger', 2);
    await expect(memory.sharePrefix('stranger', 'holder', 1, {})).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    memory.create('busy', 1);
    await memory.append('busy', tokenBytes(1, 9));
    await expect(memory.sharePrefix('busy', 'holder', 1, {})).rejects.toMatchObject({ code: 'INVALID_STATE' });
    memory.create('pinned', 1);
    memory.pin('pinned');
    await expect(memory.sharePrefix('pinned', 'holder', 1, {})).rejects.toMatchObject({ code: 'INVALID_STATE' });
    memory.create('agent', 1);
    await expect(memory.sharePrefix('agent', 'holder', 3, {})).rejects.toMatchObject({ code: 'OUT_OF_RANGE' });
    for (const id of ['stranger', 'agent']) expect(memory.contextStats(id).tokens).toBe(0);
    expect(pool.stats().sharedBlocks).toBe(0);
  });
});
