// The worker-side pieces without Temporal: digests, synthetic KV, the operation journal, capabilities,
// failure codes, worker configuration, and AgentMemory over a real tiered memory.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { ApplicationFailure } from '@temporalio/common';
import { afterEach, describe, expect, it } from 'vitest';

import type { MemoryObserver } from '../../src/agent-memory/agent-memory';
import { ContextDigest, DIGEST_CHUNK_TOKENS, emptyDigest } from '../../src/agent-memory/context-digest';
import { toApplicationFailure } from '../../src/activities/failures';
import { OperationJournal } from '../../src/activities/operation-journal';
import { syntheticKv } from '../../src/agent-memory/synthetic-kv';
import { TenantRegistry, preferredTenantId } from '../../src/shared-directory/tenant-registry';
import { FabricError } from '../../src/fabric/errors';
import { parseWorkerConfig } from '../../src/worker/config';
import { MODELS } from '../../src/workflows/models';
import { openMemory } from '../security/memory-fixture';
import { TEST_CODEC_KEYS, TEST_TRUSTED_KEYS, keyListText } from '../security/test-keys';

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

describe('operation journal', () => {
  it('applies an operation once, answers retries from the record, and forgets failures', async () => {
    const journal = new OperationJournal(2);
    let applied = 0;
    const apply = async () => ++applied;
    const [a, b] = await Promise.all([journal.run('ctx', 'op1', apply), journal.run('ctx', 'op1', apply)]);
    expect([a, b, applied]).toEqual([1, 1, 1]);
    expect(await journal.run('ctx', 'op1', apply)).toBe(1);
    await expect(journal.run('ctx', 'op2', () => Promise.reject(new Error('no')))).rejects.toThrow('no');
    expect(journal.has('ctx', 'op2')).toBe(false);
    expect(await journal.run('ctx', 'op2', apply)).toBe(2);
    await journal.run('ctx', 'op3', apply);
    expect(journal.has('ctx', 'op1')).toBe(false); // bounded per context
    expect(journal.has('other', 'op3')).toBe(false);
  });
});

describe('tenant ids', () => {
  /** Two names whose first-choice ids collide (32-bit hashes: found among ~100k names). */
  function collidingNames(): [string, string] {
    const seen = new Map<number, string>();
    for (let i = 0; ; i++) {
      const name = `tenant-${i}`;
      const other = seen.get(preferredTenantId(name));
      if (other !== undefined) return [other, name];
      seen.set(preferredTenantId(name), name);
    }
  }

  it('gives every tenant its own id, colliding hashes included, the same in every process sharing the directory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvfabric-tenants-'));
    const [first, second] = collidingNames();
    expect(preferredTenantId(first)).toBe(preferredTenantId(second));
    // Two registries (two workers) on one directory, asking at once.
    const [a, b] = [await TenantRegistry.open(dir), await TenantRegistry.open(dir)];
    const [idA1, idB2, idA2, idB1] = await Promise.all([a.idOf(first), b.idOf(second), a.idOf(second), b.idOf(first)]);
    expect(idA1).toBe(idB1);
    expect(idA2).toBe(idB2);
    expect(idA1).not.toBe(idA2);
    expect([idA1, idA2]).toContain(preferredTenantId(first)); // whoever came first kept the hash
    expect(await (await TenantRegistry.open(dir)).idOf('acme')).toBe(preferredTenantId('acme'));
    await expect(a.idOf('')).rejects.toBeInstanceOf(FabricError);
    await expect(a.idOf('../etc')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    rmSync(dir, { recursive: true, force: true });
  });
});

describe('failure codes', () => {
  it('makes permission, integrity and argument errors non-retryable, exhaustion retryable', () => {
    const as = (code: FabricError['code']) => toApplicationFailure(new FabricError(code, 'x')) as ApplicationFailure;
    for (const code of ['PERMISSION_DENIED', 'INTEGRITY', 'INVALID_ARGUMENT', 'STALE_HANDLE'] as const) {
      expect(as(code)).toMatchObject({ type: code, nonRetryable: true });
    }
    for (const code of ['POOL_EXHAUSTED', 'OUT_OF_MEMORY', 'STORAGE_FULL', 'BUSY'] as const) {
      expect(as(code)).toMatchObject({ type: code, nonRetryable: false });
    }
    const other = new Error('plain');
    expect(toApplicationFailure(other)).toBe(other);
  });
});

describe('worker configuration', () => {
  const key = randomBytes(32).toString('base64');
  it('reads flags before the environment and keys only from the environment or a file', () => {
    const security = { KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS), KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS) };
    const config = parseWorkerConfig(['--tier-dir', '/tmp/t', '--model', 'tiny', '--device-blocks', '64', '--backend', 'cpu', '--no-workflows'], {
      ...security,
      KVFABRIC_KEYS: `k1=${key}`,
      TEMPORAL_ADDRESS: 'temporal:7233',
      KVFABRIC_HOST_BLOCKS: '32',
    });
    expect(config).toMatchObject({ tierDir: '/tmp/t', deviceBlocks: 64, hostBlocks: 32, backend: 'cpu', workflows: false, activeKeyId: 'k1', activeCodecKeyId: 'test-codec-1' });
    expect(config.trustedKeys.map((k) => k.id)).toEqual(['test-sign-1']);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t'], { KVFABRIC_KEYS: `k1=${key}`, KVFABRIC_CODEC_KEYS: security.KVFABRIC_CODEC_KEYS })).toThrow(/KVFABRIC_TRUSTED_KEYS/);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t'], { KVFABRIC_KEYS: `k1=${key}`, KVFABRIC_TRUSTED_KEYS: security.KVFABRIC_TRUSTED_KEYS })).toThrow(/KVFABRIC_CODEC_KEYS/);
    expect(config.temporal).toEqual({ address: 'temporal:7233', namespace: 'default' });
    expect(config.model).toBe(MODELS.tiny);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t'], {})).toThrow(/no master key/);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t', '--backend', 'tpu'], { KVFABRIC_KEYS: `k1=${key}` })).toThrow(/backend/);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t'], { KVFABRIC_KEYS: 'k1=c2hvcnQ=' })).toThrow(/32 bytes/);
    expect(() => parseWorkerConfig(['--key', key], {})).toThrow();
  });

  it('sweeps orphan segments every 10 minutes, taking those an hour old, unless told otherwise', () => {
    const env = { KVFABRIC_KEYS: `k1=${key}`, KVFABRIC_TRUSTED_KEYS: keyListText(TEST_TRUSTED_KEYS), KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS) };
    expect(parseWorkerConfig(['--tier-dir', '/tmp/t'], env)).toMatchObject({ housekeepingMs: 600_000, orphanMinAgeMs: 3_600_000 });
    expect(parseWorkerConfig(['--tier-dir', '/tmp/t', '--housekeeping-ms', '0', '--orphan-min-age-ms', '5000'], env)).toMatchObject({ housekeepingMs: 0, orphanMinAgeMs: 5000 });
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t', '--orphan-min-age-ms', 'soon'], env)).toThrow(/--orphan-min-age-ms must be an integer >= 0, got 'soon'/);
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
    const t0 = await a.memory.appendTurn('ctx', 0, 21, emptyDigest());
    expect(t0.alreadyApplied).toBe(false);
    const t1 = await a.memory.appendTurn('ctx', 1, 9, t0.digest);
    // The same turn again (its record lost): found in the context, verified, not appended twice.
    const again = await a.memory.appendTurn('ctx', 1, 9, t0.digest);
    expect(again).toEqual({ digest: t1.digest, alreadyApplied: true });
    expect(a.memory.snapshot('ctx').tokens).toBe(30);
    // A turn the context does not match is an integrity error.
    await expect(a.memory.appendTurn('ctx', 5, 3, t0.digest)).rejects.toMatchObject({ code: 'INTEGRITY' });

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
    await memory.appendTurn('old', 0, 64, emptyDigest()); // 4 of 8 device blocks
    await memory.create(call('new', 'acme', 'allocate', mint('new')), false);
    await memory.appendTurn('new', 0, 96, emptyDigest()); // 6 more: 'old' has to make room
    await memory.tiers.idle();
    expect(evictions).toEqual(['device->host']);
    await expect(memory.admit(call('new', 'acme', 'append', mint('old')))).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(denials).toEqual(['append']);
    await close();
  });
});
