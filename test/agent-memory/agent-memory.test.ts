// The worker's own logic without Temporal: digests, synthetic KV, and AgentMemory over a real tiered
// memory with real capabilities, grants and tenants.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import type { MemoryObserver } from '../../src/agent-memory/agent-memory';
import { ContextDigest, DIGEST_CHUNK_TOKENS, emptyDigest } from '../../src/agent-memory/context-digest';
import { syntheticKv } from '../../src/engines/synthetic/synthetic-kv';
import { openMemory } from '../security/memory-fixture';

const BPT = 256;

describe('context digest', () => {
  it('does not depend on how the bytes are sliced, and continues from a carried state', () => {
    const bytes = randomBytes(100 * BPT);
    const whole = ContextDigest.fresh(BPT).update(bytes).finish();
    const sliced = ContextDigest.fresh(BPT);
    for (let at = 0; at < bytes.length; at += 7 * BPT) sliced.update(bytes.subarray(at, at + 7 * BPT));
    expect(sliced.finish()).toEqual(whole);
    expect(whole).toMatchObject({ tokens: 100, chainedTokens: 96 });

    // A turn continues from the carried state plus the partly filled chunk re-read from the context.
    const first = ContextDigest.fresh(BPT).update(bytes.subarray(0, 37 * BPT)).finish();
    const continued = ContextDigest.resume(first, BPT).update(bytes.subarray(first.chainedTokens * BPT)).finish();
    expect(continued).toEqual(whole);
    expect(first.chainedTokens % DIGEST_CHUNK_TOKENS).toBe(0);
  });

  it('tells contexts apart by every byte and by length', () => {
    const bytes = randomBytes(20 * BPT);
    const flipped = Buffer.from(bytes);
    flipped[bytes.length - 1]! ^= 1;
    expect(ContextDigest.fresh(BPT).update(flipped).finish().value).not.toBe(ContextDigest.fresh(BPT).update(bytes).finish().value);
    expect(ContextDigest.fresh(BPT).update(bytes.subarray(0, 19 * BPT)).finish().value).not.toBe(ContextDigest.fresh(BPT).update(bytes).finish().value);
    expect(emptyDigest()).toMatchObject({ tokens: 0, chainedTokens: 0 });
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
    await b.memory.recover('ctx', 'acme');
    await b.memory.restore('ctx');
    expect(await b.memory.verify('ctx', t1.digest)).toEqual(t1.digest);
    await expect(b.memory.verify('ctx', t0.digest)).resolves.toEqual(t1.digest); // a verified prefix, and more
    await expect(b.memory.verify('ctx', { ...t1.digest, value: '00'.repeat(32) })).rejects.toMatchObject({ code: 'INTEGRITY' });
    await expect(b.memory.admit(b.call('ctx', 'acme', 'restore', b.token('other')))).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    // The manifest names its tenant: another tenant cannot adopt it, whatever the grant file says.
    const c = await open(dir);
    await expect(c.memory.recover('ctx', 'globex')).rejects.toMatchObject({ code: 'PERMISSION_DENIED', message: 'recover of context ctx denied: foreign-manifest' });
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
