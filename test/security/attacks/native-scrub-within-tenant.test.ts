// Attack of issue 25, item 10: within one tenant, a new context reads what a released one left in the
// frames it gets. Agent A of tenant acme writes known bytes and is released; agent B of acme gets A's
// frames and reads them raw (readBlock: the whole block, unfilled slots included, as an engine's kernel
// would see it). Under the default scrub policy ('always') B sees only its own bytes and zeros; the
// opt-out ('on-tenant-change', for benchmarks) is shown leaking, so the attack is real. No capability is
// involved at this layer, so nothing is audited.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import { NativeAllocator, type PoolOptions } from '../../../src/fabric';
import { TenantRegistry } from '../../../src/shared-directory/tenant-registry';
import { posixStore, testRecordSeal } from '../../shared-directory/fixtures/test-records';
import { TieredMemory } from '../../../src/tiers/tiered-memory';
import { MODELS } from '../../../src/engines/models';

const model = MODELS.tiny!;
const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

async function worker(scrub?: PoolOptions['scrub']) {
  const dir = mkdtempSync(join(tmpdir(), 'kvfabric-scrub-'));
  const pool = new NativeAllocator({
    shape: model.shape,
    tokensPerBlock: model.tokensPerBlock,
    blockCount: 8,
    backend: 'cpu',
    ...(scrub ? { scrub } : {}),
  });
  cleanups.push(() => {
    pool.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const acme = await (await TenantRegistry.open(await posixStore(dir), 'tenants/', testRecordSeal())).idOf('acme');
  return { pool, memory: new TieredMemory({ pool }), acme };
}

/** A's secret: every byte 0xA5, so any of it showing through is plain to see. */
function secret(tokens: number, bytesPerToken: number): Uint8Array {
  return new Uint8Array(tokens * bytesPerToken).fill(0xa5);
}

/** Every page of B raw, as blocks: its own token bytes and, everywhere else, what the frame held. */
function rawPages(pool: NativeAllocator, memory: TieredMemory, id: string): Uint8Array[] {
  const handle = memory.handle(id);
  return Array.from({ length: pool.contextStats(handle).blocks }, (_, page) => pool.readBlock(handle, page));
}

/** A writes 1.5 blocks and is released; B, same tenant, appends 17 tokens of its own (a full and a partial block). */
async function reuseWithinTenant(scrub?: PoolOptions['scrub']) {
  const { pool, memory, acme } = await worker(scrub);
  const { bytesPerToken, tokensPerBlock } = pool.layout;
  memory.create('agent-a', acme);
  await memory.append('agent-a', secret(tokensPerBlock + tokensPerBlock / 2, bytesPerToken));
  const framesOfA = Array.from(pool.blockTable(memory.handle('agent-a')));
  await memory.release('agent-a');
  memory.create('agent-b', acme);
  const own = new Uint8Array((tokensPerBlock + 1) * bytesPerToken).fill(0x11);
  await memory.append('agent-b', own);
  const framesOfB = Array.from(pool.blockTable(memory.handle('agent-b')));
  expect(framesOfB.filter((frame) => framesOfA.includes(frame))).toHaveLength(2); // B really got A's frames
  return { pool, memory, own, pages: rawPages(pool, memory, 'agent-b') };
}

describe('native-scrub attack: a released context of the same tenant', () => {
  it('shows agent B only its own bytes and zeros, by default', async () => {
    const { pool, memory, own, pages } = await reuseWithinTenant();
    expect(pool.scrubPolicy).toBe('always');
    for (const page of pages) expect(page.includes(0xa5)).toBe(false);
    const { planes, planeBytes, tokenPlaneBytes } = pool.layout;
    // The partial second page: slot 0 of each plane is B's token, the rest zero.
    for (let plane = 0; plane < planes; plane++) {
      const rest = pages[1]!.subarray(plane * planeBytes + tokenPlaneBytes, (plane + 1) * planeBytes);
      expect(rest.every((byte) => byte === 0)).toBe(true);
    }
    expect(Buffer.from(await memory.read('agent-b', 0, own.length / pool.layout.bytesPerToken)).equals(Buffer.from(own))).toBe(true);
  });

  it('leaks A to B under the on-tenant-change opt-out (what the default closes)', async () => {
    const { pages } = await reuseWithinTenant('on-tenant-change');
    expect(pages[1]!.includes(0xa5)).toBe(true);
  });
});
