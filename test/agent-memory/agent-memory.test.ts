// The worker's own logic without Temporal: digests, synthetic KV, and AgentMemory over a real tiered
// memory with real capabilities, grants and tenants.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';

import type { MemoryObserver } from '../../src/agent-memory/agent-memory';
import { digestOfBytes, emptyDigest, pageDigest } from '../../src/agent-memory/context-digest';
import { ChainDigest } from '../../src/agent-memory/legacy-chain-digest';
import { syntheticKv } from '../../src/engines/synthetic/synthetic-kv';
import { NativeAllocator } from '../../src/fabric/native-allocator';
import { MODELS } from '../../src/client/models';
import { openMemory } from '../security/memory-fixture';

const SHAPE = MODELS.tiny!.shape;
const BPT = 256; // the tiny model's bytes per token

describe('context digest', () => {
  const TPB = 16;

  it('is the same however appends slice the tokens, forks share them or copy on write (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 70 }), fc.array(fc.integer({ min: 1, max: 40 }), { maxLength: 6 }), fc.integer({ min: 0, max: 10 }), (first, cuts, extra) => {
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
      }),
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
    expect(emptyDigest()).toMatchObject({ scheme: 'page-checksums', tokens: 0 });
    expect(() => pageDigest([1, 2], 40, TPB)).toThrow(RangeError);
  });

  it('checks a digest recorded before page checksums over every byte, then carries the new one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvfabric-mem-'));
    const { memory, close, token, call } = await openMemory(dir, { blockCount: 64 });
    try {
      await memory.create(call('old', 'acme', 'allocate', token('old')), true);
      const kv = syntheticKv('old', 0, 21, BPT);
      await memory.appendTurn('old', 0, { tokens: 21 }, emptyDigest());
      const legacy = ChainDigest.fresh(BPT).update(kv).finish();
      const next = await memory.appendTurn('old', 1, { tokens: 9 }, legacy);
      const all = Buffer.concat([kv, syntheticKv('old', 1, 9, BPT)]);
      expect(next.digest).toEqual(digestOfBytes(all, BPT, TPB));
      await expect(memory.verify('old', ChainDigest.fresh(BPT).update(all).finish())).resolves.toEqual(next.digest);
      const wrong = ChainDigest.fresh(BPT).update(syntheticKv('other', 0, 30, BPT)).finish();
      await expect(memory.verify('old', wrong)).rejects.toMatchObject({ code: 'INTEGRITY' });
    } finally {
      await close();
      rmSync(dir, { recursive: true, force: true });
    }
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

  it('appends each turn once, verifies restores, and tells an applied turn from a missing one', async () => {
    const dir = tempDir();
    const a = await open(dir);
    const token = a.token('ctx');
    await a.memory.create(a.call('ctx', 'acme', 'allocate', token), true);
    const t0 = await a.memory.appendTurn('ctx', 0, { tokens: 21 }, emptyDigest());
    expect(t0.alreadyApplied).toBe(false);
    const t1 = await a.memory.appendTurn('ctx', 1, { tokens: 9 }, t0.digest);
    // The same turn again (its record lost): found in the context, verified, not appended twice.
    const again = await a.memory.appendTurn('ctx', 1, { tokens: 9 }, t0.digest);
    expect(again).toEqual({ digest: t1.digest, alreadyApplied: true });
    expect(a.memory.snapshot('ctx').tokens).toBe(30);
    // A turn the context does not match is an integrity error.
    await expect(a.memory.appendTurn('ctx', 5, { tokens: 3 }, t0.digest)).rejects.toMatchObject({ code: 'INTEGRITY' });

    await a.memory.checkpoint('ctx');
    // Another process adopts it from the cold tier and verifies every byte.
    const b = await open(dir);
    await b.memory.admit(b.call('ctx', 'acme', 'recover', token));
    await b.memory.recover('ctx', 'acme', 0);
    await b.memory.restore('ctx');
    expect(await b.memory.verify('ctx', t1.digest)).toEqual(t1.digest);
    await expect(b.memory.verify('ctx', t0.digest)).resolves.toEqual(t1.digest); // a verified prefix, and more
    await expect(b.memory.verify('ctx', { ...t1.digest, value: '00'.repeat(32) })).rejects.toMatchObject({ code: 'INTEGRITY' });
    await expect(b.memory.admit(b.call('ctx', 'acme', 'restore', b.token('other')))).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    // The manifest names its tenant: another tenant cannot adopt it, whatever the grant file says.
    const c = await open(dir);
    await expect(c.memory.recover('ctx', 'globex', 0)).rejects.toMatchObject({ code: 'PERMISSION_DENIED', message: 'recover of context ctx denied: foreign-manifest' });
    expect(c.memory.holds('ctx')).toBe(false);
    // Audited like any other refusal.
    expect(readFileSync(c.auditFile, 'utf8')).toContain('"reason":"foreign-manifest"');
    await a.close();
    await b.close();
    await c.close();
  });

  it('reports contexts the tier layer evicts on its own, and denials', async () => {
    const evictions: string[] = [];
    const denials: string[] = [];
    const observer: MemoryObserver = { transferred: () => undefined, evicted: (from, to) => evictions.push(`${from}->${to}`), denied: (action) => denials.push(action), checkpointSkipped: () => undefined };
    const { memory, close, token: mint, call } = await open(tempDir(), 8, observer);
    await memory.create(call('old', 'acme', 'allocate', mint('old')), false);
    await memory.appendTurn('old', 0, { tokens: 64 }, emptyDigest()); // 4 of 8 device blocks
    await memory.create(call('new', 'acme', 'allocate', mint('new')), false);
    await memory.appendTurn('new', 0, { tokens: 96 }, emptyDigest()); // 6 more: 'old' has to make room
    await memory.tiers.idle();
    expect(evictions).toEqual(['device->host']);
    await expect(memory.admit(call('new', 'acme', 'append', mint('old')))).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(denials).toEqual(['append']);
    await close();
  });
});
