// The worker-side pieces without Temporal: digests, synthetic KV, the operation journal, capabilities,
// failure codes, worker configuration, and AgentMemory over a real tiered memory.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { ApplicationFailure } from '@temporalio/common';
import { afterEach, describe, expect, it } from 'vitest';

import { AgentMemory, type MemoryObserver } from '../../src/activities/agent-memory';
import { authorize, grantFor } from '../../src/activities/capability';
import { ContextDigest, DIGEST_CHUNK_TOKENS, emptyDigest } from '../../src/activities/context-digest';
import { toApplicationFailure } from '../../src/activities/failures';
import { GrantStore } from '../../src/activities/grant-store';
import { OperationJournal } from '../../src/activities/operation-journal';
import { syntheticKv } from '../../src/activities/synthetic-kv';
import { tenantIdOf } from '../../src/activities/tenant-id';
import { FabricError } from '../../src/fabric/errors';
import { NativeAllocator } from '../../src/fabric/native-allocator';
import { ColdStore, KeyRing } from '../../src/tiers/cold';
import { TieredMemory } from '../../src/tiers/tiered-memory';
import { parseWorkerConfig } from '../../src/worker/config';
import { MODELS } from '../../src/workflows/models';

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

describe('capabilities', () => {
  it('grants hold digests only and deny other tokens and tenants', () => {
    const token = 'a'.repeat(32);
    const grant = grantFor('ctx', 'acme', token);
    expect(JSON.stringify(grant)).not.toContain(token);
    expect(() => authorize(grant, 'acme', token, 'resume')).not.toThrow();
    expect(() => authorize(grant, 'acme', 'b'.repeat(32), 'resume')).toThrow(expect.objectContaining({ code: 'PERMISSION_DENIED' }));
    expect(() => authorize(grant, 'globex', token, 'resume')).toThrow(expect.objectContaining({ code: 'PERMISSION_DENIED' }));
    expect(() => authorize(grant, 'acme', 42, 'resume')).toThrow(expect.objectContaining({ code: 'PERMISSION_DENIED' }));
    try {
      authorize(grant, 'acme', 'c'.repeat(32), 'resume');
    } catch (err) {
      expect((err as Error).message).not.toContain('c'.repeat(32));
    }
  });

  it('maps tenants to stable non-zero ids', () => {
    expect(tenantIdOf('acme')).toBe(tenantIdOf('acme'));
    expect(tenantIdOf('acme')).not.toBe(tenantIdOf('globex'));
    expect(() => tenantIdOf('')).toThrow(FabricError);
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
    const config = parseWorkerConfig(['--tier-dir', '/tmp/t', '--model', 'tiny', '--device-blocks', '64', '--backend', 'cpu', '--no-workflows'], {
      KVFABRIC_KEYS: `k1=${key}`,
      TEMPORAL_ADDRESS: 'temporal:7233',
      KVFABRIC_HOST_BLOCKS: '32',
    });
    expect(config).toMatchObject({ tierDir: '/tmp/t', deviceBlocks: 64, hostBlocks: 32, backend: 'cpu', workflows: false, activeKeyId: 'k1' });
    expect(config.temporal).toEqual({ address: 'temporal:7233', namespace: 'default' });
    expect(config.model).toBe(MODELS.tiny);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t'], {})).toThrow(/no master key/);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t', '--backend', 'tpu'], { KVFABRIC_KEYS: `k1=${key}` })).toThrow(/backend/);
    expect(() => parseWorkerConfig(['--tier-dir', '/tmp/t'], { KVFABRIC_KEYS: 'k1=c2hvcnQ=' })).toThrow(/32 bytes/);
    expect(() => parseWorkerConfig(['--key', key], {})).toThrow();
  });
});

describe('AgentMemory over tiered memory', () => {
  const dirs: string[] = [];
  afterEach(() => dirs.splice(0).forEach((dir) => rmSync(dir, { recursive: true, force: true })));

  async function open(dir: string, blockCount = 64, observer?: MemoryObserver) {
    const pool = new NativeAllocator({ shape: MODELS.tiny!.shape, blockCount, hostBlockCount: 64 });
    const cold = await ColdStore.open({ directory: join(dir, 'cold'), keyRing: new KeyRing([{ id: 'k', key: Buffer.alloc(32, 7) }], 'k') });
    const grants = await GrantStore.open(join(dir, 'grants'));
    const memory = new AgentMemory({ tiers: new TieredMemory({ pool, cold }), layout: pool.layout, grants, cold, ...(observer ? { observer } : {}) });
    const close = async () => {
      await cold.close();
      pool.close();
    };
    return { memory, close };
  }

  function tempDir(): string {
    const dir = mkdtempSync(join(tmpdir(), 'kvfabric-mem-'));
    dirs.push(dir);
    return dir;
  }

  it('appends each turn once, verifies restores, and tells an applied turn from a missing one', async () => {
    const dir = tempDir();
    const a = await open(dir);
    const token = 'x'.repeat(24);
    await a.memory.create('ctx', 'acme', token, true);
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
    await b.memory.admit('ctx', 'acme', token, 'recover');
    await b.memory.recover('ctx', 'acme');
    await b.memory.restore('ctx');
    expect(await b.memory.verify('ctx', t1.digest)).toEqual(t1.digest);
    await expect(b.memory.verify('ctx', t0.digest)).resolves.toEqual(t1.digest); // a verified prefix, and more
    await expect(b.memory.verify('ctx', { ...t1.digest, value: '00'.repeat(32) })).rejects.toMatchObject({ code: 'INTEGRITY' });
    await expect(b.memory.admit('ctx', 'acme', 'y'.repeat(24), 'restore')).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    // The manifest names its tenant: another tenant cannot adopt it, whatever the grant file says.
    const c = await open(dir);
    await expect(c.memory.recover('ctx', 'globex')).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(c.memory.holds('ctx')).toBe(false);
    await a.close();
    await b.close();
    await c.close();
  });

  it('reports contexts the tier layer evicts on its own, and denials', async () => {
    const evictions: string[] = [];
    const denials: string[] = [];
    const observer: MemoryObserver = { transferred: () => undefined, evicted: (from, to) => evictions.push(`${from}->${to}`), denied: (action) => denials.push(action) };
    const { memory, close } = await open(tempDir(), 8, observer);
    const token = 'z'.repeat(24);
    await memory.create('old', 'acme', token, false);
    await memory.appendTurn('old', 0, 64, emptyDigest()); // 4 of 8 device blocks
    await memory.create('new', 'acme', token, false);
    await memory.appendTurn('new', 0, 96, emptyDigest()); // 6 more: 'old' has to make room
    await memory.tiers.idle();
    memory.noticeEvictions();
    expect(evictions).toEqual(['device->host']);
    await expect(memory.admit('new', 'acme', 'q'.repeat(24), 'turn')).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(denials).toEqual(['turn']);
    await close();
  });
});
