// The worker's own logic without Temporal: digests, synthetic KV, and AgentMemory over a real tiered
// memory with real capabilities, grants and tenants.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';

import type { MemoryObserver, RunAdmitted } from '../../src/agent-memory/agent-memory';
import type { DigestState } from '../../src/agent-memory/context-digest';
import { digestOfBytes, emptyDigest, pageDigest } from '../../src/agent-memory/context-digest';
import { syntheticKv } from '../../src/engines/synthetic/synthetic-kv';
import { NativeAllocator } from '../../src/fabric/native-allocator';
import { MODELS } from '../../src/engines/models';
import { GrantStore } from '../../src/shared-directory/grant-store';
import { openMemory, type MemoryFixture } from '../security/memory-fixture';
import { posixStore, testRecordSeal } from '../shared-directory/fixtures/test-records';

const SHAPE = MODELS.tiny!.shape;
const BPT = 256; // the tiny model's bytes per token

describe('context digest', () => {
  const TPB = 16;

  it('is the same however appends slice the tokens, forks share them or copy on write (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 70 }),
        fc.array(fc.integer({ min: 1, max: 40 }), { maxLength: 6 }),
        fc.integer({ min: 0, max: 10 }),
        (first, cuts, extra) => {
          const pool = new NativeAllocator({ shape: SHAPE, blockCount: 64, tokensPerBlock: TPB });
          try {
            const total = first + cuts.reduce((a, b) => a + b, 0);
            const bytes = randomBytes((total + extra) * BPT);
            const ctx = pool.createContext(1);
            pool.append(ctx, bytes.subarray(0, first * BPT));
            const fork = pool.fork(ctx); // its next append copies the shared last page on write
            let at = first;
            for (const n of cuts) {
              pool.append(ctx, bytes.subarray(at * BPT, (at + n) * BPT));
              at += n;
            }
            pool.append(fork, bytes.subarray(total * BPT));
            expect(pageDigest(pool.pageChecksums(ctx), total, TPB)).toEqual(digestOfBytes(bytes.subarray(0, total * BPT), BPT, TPB));
            const forked = Buffer.concat([bytes.subarray(0, first * BPT), bytes.subarray(total * BPT)]);
            expect(pageDigest(pool.pageChecksums(fork), first + extra, TPB)).toEqual(digestOfBytes(forked, BPT, TPB));
          } finally {
            pool.close();
          }
        },
      ),
      { numRuns: 60 },
    );
  });

  it('tells contexts apart by every byte, by length and by page order', () => {
    const bytes = randomBytes(40 * BPT);
    const digest = digestOfBytes(bytes, BPT, TPB).value;
    const flipped = Buffer.from(bytes);
    flipped[bytes.length - 1]! ^= 1;
    expect(digestOfBytes(flipped, BPT, TPB).value).not.toBe(digest);
    expect(digestOfBytes(bytes.subarray(0, 39 * BPT), BPT, TPB).value).not.toBe(digest);
    const swapped = Buffer.concat([bytes.subarray(TPB * BPT, 2 * TPB * BPT), bytes.subarray(0, TPB * BPT), bytes.subarray(2 * TPB * BPT)]);
    expect(digestOfBytes(swapped, BPT, TPB).value).not.toBe(digest);
    expect(emptyDigest()).toMatchObject({ tokens: 0 });
    expect(() => pageDigest([1, 2], 40, TPB)).toThrow(RangeError);
  });
});

describe('synthetic KV', () => {
  it('is a deterministic function of agent and turn', () => {
    expect(Buffer.from(syntheticKv('a', 3, 5, BPT)).equals(Buffer.from(syntheticKv('a', 3, 5, BPT)))).toBe(true);
    expect(Buffer.from(syntheticKv('a', 3, 5, BPT)).equals(Buffer.from(syntheticKv('a', 4, 5, BPT)))).toBe(false);
    expect(Buffer.from(syntheticKv('a', 3, 5, BPT)).equals(Buffer.from(syntheticKv('b', 3, 5, BPT)))).toBe(false);
    expect(syntheticKv('a', 0, 3, BPT)).toHaveLength(3 * BPT);
  });
});

describe('AgentMemory over tiered memory', () => {
  const dirs: string[] = [];
  afterEach(() => dirs.splice(0).forEach((dir) => rmSync(dir, { recursive: true, force: true })));

  async function open(dir: string, blockCount = 64, observer?: MemoryObserver) {
    return openMemory(dir, { blockCount, ...(observer ? { observer } : {}) });
  }

  function tempDir(): string {
    const dir = mkdtempSync(join(tmpdir(), 'kvfabric-mem-'));
    dirs.push(dir);
    return dir;
  }

  /** A synthetic turn of `tokens` tokens as the agent's own workflow asks for it. */
  function turn(fx: MemoryFixture, agentId: string, token: string, n: number, tokens: number, before: DigestState) {
    return fx.memory.turn(fx.call(agentId, 'acme', 'turn', token), { turn: n, tokens, before, checkpoint: false });
  }

  it('appends each turn once, verifies every resume, and tells an applied turn from a missing one', async () => {
    const dir = tempDir();
    const a = await open(dir);
    const token = a.token('ctx');
    expect(
      await a.memory.allocate(a.call('ctx', 'acme', 'allocate', token), { shape: SHAPE, tokensPerBlock: 16, checkpoint: true }),
    ).toMatchObject({ created: true, tokens: 0, digest: emptyDigest() });
    const t0 = await turn(a, 'ctx', token, 0, 21, emptyDigest());
    expect(t0).toMatchObject({ alreadyApplied: false, tokens: 21, tier: 'device' });
    const t1 = await turn(a, 'ctx', token, 1, 9, t0.digest);
    // The same turn again (its record lost): found in the context, verified, not appended twice.
    const again = await turn(a, 'ctx', token, 1, 9, t0.digest);
    expect(again).toMatchObject({ digest: t1.digest, alreadyApplied: true, tokens: 30 });
    // A turn the context does not match is an integrity error.
    await expect(turn(a, 'ctx', token, 5, 3, t0.digest)).rejects.toMatchObject({ code: 'INTEGRITY' });
    // A turn is a message or a token count, never neither.
    await expect(
      a.memory.turn(a.call('ctx', 'acme', 'turn', token), { turn: 2, before: t1.digest, checkpoint: false }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });

    const suspended = await a.memory.suspend(a.call('ctx', 'acme', 'suspend', token), { tier: 'disk' });
    expect(suspended).toMatchObject({ tier: 'disk', tokens: 30 });
    expect(suspended.bytes).toBeGreaterThan(0);
    // Another process adopts it from the cold tier, and every resume checks it against the digest.
    const b = await open(dir);
    expect(
      await b.memory.recover(b.call('ctx', 'acme', 'recover', token), { minVersion: suspended.durableVersion, epoch: 1, attempt: 1 }),
    ).toMatchObject({ tokens: 30 });
    const resumed = await b.memory.resume(b.call('ctx', 'acme', 'resume', token), { expected: t1.digest });
    expect(resumed).toMatchObject({ tier: 'device', tokens: 30, from: 'disk', digest: t1.digest, bytes: 2 * 16 * BPT }); // whole pages
    expect(resumed.verifyMs).toBeGreaterThanOrEqual(0);
    // A verified prefix, and more (a turn in flight): the digest of the whole context comes back.
    await expect(b.memory.resume(b.call('ctx', 'acme', 'resume', token), { expected: t0.digest })).resolves.toMatchObject({
      from: 'device',
      bytes: 0,
      digest: t1.digest,
    });
    await expect(
      b.memory.resume(b.call('ctx', 'acme', 'resume', token), { expected: { ...t1.digest, value: '00'.repeat(32) } }),
    ).rejects.toMatchObject({
      code: 'INTEGRITY',
    });
    await expect(b.memory.resume(b.call('ctx', 'acme', 'resume', token), { expected: { ...t1.digest, tokens: 31 } })).rejects.toMatchObject(
      {
        code: 'INTEGRITY',
      },
    );
    await expect(b.memory.resume(b.call('ctx', 'acme', 'resume', b.token('other')), { expected: t1.digest })).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
    });
    // The manifest names its tenant: another tenant cannot adopt it, whatever the grant file says.
    const grants = await GrantStore.open(await posixStore(dir), 'grants/', testRecordSeal());
    await grants.delete('ctx');
    await grants.put({ contextId: 'ctx', tenant: 'globex', agentId: 'ctx' });
    const c = await open(dir);
    const recover = c.memory.recover(c.call('ctx', 'globex', 'recover', c.token('ctx', 'globex')), { minVersion: 0, epoch: 2, attempt: 1 });
    await expect(recover).rejects.toMatchObject({ code: 'PERMISSION_DENIED', message: 'recover of context ctx denied: foreign-manifest' });
    expect(c.memory.holds('ctx')).toBe(false);
    // Audited like any other refusal.
    expect(readFileSync(c.auditFile, 'utf8')).toContain('"reason":"foreign-manifest"');
    await a.close();
    await b.close();
    await c.close();
  });

  it('runs nothing for a refused call: admission comes before the work its caller hands in', async () => {
    const fx = await open(tempDir());
    const owner = fx.token('ctx');
    await fx.memory.allocate(fx.call('ctx', 'acme', 'allocate', owner), { shape: SHAPE, tokensPerBlock: 16, checkpoint: false });
    const ran: string[] = [];
    const run: RunAdmitted = (work) => {
      ran.push('work');
      return work();
    };
    const stranger = fx.token('ctx', 'acme', { rights: ['resume'] });
    await expect(
      fx.memory.turn(fx.call('ctx', 'acme', 'turn', stranger), { turn: 0, tokens: 4, before: emptyDigest(), checkpoint: false }, run),
    ).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    await expect(fx.memory.release(fx.call('ctx', 'acme', 'release', fx.token('ctx', 'globex')), run)).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
    });
    await expect(fx.memory.pin(fx.call('nobody', 'acme', 'suspend', fx.token('nobody')), run)).rejects.toMatchObject({
      code: 'STALE_HANDLE',
    });
    expect(ran).toEqual([]);
    await expect(fx.memory.pin(fx.call('ctx', 'acme', 'pin', owner), run)).resolves.toMatchObject({ pinned: true });
    await expect(fx.memory.release(fx.call('ctx', 'acme', 'release', owner), run)).resolves.toEqual({ releasedTokens: 0 });
    expect(ran).toEqual(['work', 'work']);
    expect(fx.memory.holds('ctx')).toBe(false);
    await fx.close();
  });

  it('rejects an allocation for a model whose pages do not fit this pool', async () => {
    const fx = await open(tempDir());
    const call = fx.call('ctx', 'acme', 'allocate', fx.token('ctx'));
    await expect(
      fx.memory.allocate(call, { shape: MODELS['llama-3-8b']!.shape, tokensPerBlock: 16, checkpoint: false }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(fx.memory.allocate(call, { shape: SHAPE, tokensPerBlock: 32, checkpoint: false })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    expect(fx.memory.holds('ctx')).toBe(false);
    expect(await fx.memory.allocate(call, { shape: SHAPE, tokensPerBlock: 16, checkpoint: false })).toMatchObject({ created: true });
    expect(await fx.memory.allocate(call, { shape: SHAPE, tokensPerBlock: 16, checkpoint: false })).toMatchObject({ created: false });
    await fx.close();
  });

  it('reports contexts the tier layer evicts on its own, and denials', async () => {
    const evictions: string[] = [];
    const denials: string[] = [];
    const observer: MemoryObserver = {
      transferred: () => undefined,
      evicted: (from, to) => evictions.push(`${from}->${to}`),
      denied: (action) => denials.push(action),
      checkpointSkipped: () => undefined,
      quotaRefused: () => undefined,
    };
    const fx = await open(tempDir(), 8, observer);
    const allocate = (id: string) =>
      fx.memory.allocate(fx.call(id, 'acme', 'allocate', fx.token(id)), { shape: SHAPE, tokensPerBlock: 16, checkpoint: false });
    await allocate('old');
    await turn(fx, 'old', fx.token('old'), 0, 64, emptyDigest()); // 4 of 8 device blocks
    await allocate('new');
    await turn(fx, 'new', fx.token('new'), 0, 96, emptyDigest()); // 6 more: 'old' has to make room
    await fx.tiers.idle();
    expect(evictions).toEqual(['device->host']);
    await expect(turn(fx, 'new', fx.token('old'), 1, 4, emptyDigest())).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(denials).toEqual(['turn']);
    await fx.close();
  });
});
