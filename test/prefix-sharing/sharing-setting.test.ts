// The `sharing` field of a turn, as a raw caller may send it: anything but 'tenant' or 'none' is
// INVALID_ARGUMENT and changes nothing; and a worker whose engine makes stand-in KV (the synthetic one)
// shares nothing even with salts, since its rows are made per context, not per token.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import { emptyDigest } from '../../src/agent-memory/context-digest';
import { TenantSalts } from '../../src/prefix-sharing/prefix-keys';
import { openMemory, type MemoryFixture } from '../security/memory-fixture';
import { TEST_KEY_RING } from '../shared-directory/fixtures/test-records';

let fx: MemoryFixture | undefined;
let dir: string | undefined;
afterEach(async () => {
  await fx?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the sharing setting of a turn', () => {
  it('is tenant or none; anything else is INVALID_ARGUMENT before the turn', async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvfabric-sharing-setting-'));
    fx = await openMemory(dir, { prefixSalts: new TenantSalts(TEST_KEY_RING) });
    const token = fx.token('agent');
    await fx.allocate('agent', token);
    const ask = {
      turn: 0,
      message: 'hello there, a message long enough to fill a block of sixteen tokens',
      before: emptyDigest(),
      checkpoint: false,
    };
    for (const sharing of ['all', '', 1, null]) {
      await expect(fx.memory.turn(fx.call('agent', 'acme', 'turn', token), { ...ask, sharing } as never)).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
      });
    }
    expect(fx.tiers.contextStats('agent').tokens).toBe(0);
    const applied = await fx.memory.turn(fx.call('agent', 'acme', 'turn', token), { ...ask, sharing: 'tenant' });
    // The synthetic engine's first turn ran as a plain turn: no prefix in the pages, no holder made.
    expect(applied.digest.tokens).toBe(0);
    await fx.memory.settled();
    expect(fx.tiers.contextIds()).toEqual(['agent']);
  });
});
