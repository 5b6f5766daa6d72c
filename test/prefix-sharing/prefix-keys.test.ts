// Prefix keys: the same tokens of the same tenant under the same engine give the same keys; another
// tenant's are disjoint; a token changed in block i changes keys i..n and no earlier one; a partial last
// block has none; and the salt depends on the worker's key ring, which no caller holds.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import type { EngineFingerprint } from '../../src/engines/fingerprint';
import { MODELS } from '../../src/engines/models';
import { PrefixIndex } from '../../src/prefix-sharing/prefix-index';
import { prefixKeys, TenantSalts } from '../../src/prefix-sharing/prefix-keys';
import { KeyRing } from '../../src/tiers/cold';

const TPB = 16;
const salts = new TenantSalts(new KeyRing([{ id: 'w', key: Buffer.alloc(32, 3) }], 'w'));
const FINGERPRINT: EngineFingerprint = {
  engine: 'llama.cpp',
  version: 'test',
  modelSha256: 'a'.repeat(64),
  flashAttention: false,
  kType: 'f16',
  vType: 'f16',
  shape: MODELS['smollm2-135m']!.shape,
  contextLength: 2048,
};
const keysOf = (tokens: number[], tenant: string, fingerprint = FINGERPRINT) =>
  prefixKeys(Uint32Array.from(tokens), { fingerprint, salt: salts.of(tenant), tokensPerBlock: TPB });

const tokens = fc.array(fc.integer({ min: 0, max: 2 ** 32 - 1 }), { minLength: 0, maxLength: 6 * TPB });
const tenant = fc.string({ minLength: 1, maxLength: 12 });

describe('prefix keys', () => {
  it('same tokens and tenant: same keys, one per full block, none for a partial last block', () => {
    fc.assert(
      fc.property(tokens, tenant, (ids, who) => {
        const keys = keysOf(ids, who);
        expect(keys).toHaveLength(Math.floor(ids.length / TPB));
        expect(keysOf([...ids], who)).toEqual(keys);
        // A prefix's keys are the first keys of the longer prompt's.
        expect(keysOf(ids.slice(0, ids.length - (ids.length % TPB)), who)).toEqual(keys);
      }),
    );
  });

  it('another tenant: no key in common', () => {
    fc.assert(
      fc.property(tokens, tenant, tenant, (ids, a, b) => {
        fc.pre(a !== b);
        const theirs = new Set(keysOf(ids, b));
        expect(keysOf(ids, a).filter((key) => theirs.has(key))).toEqual([]);
      }),
    );
  });

  it('a token changed in block i changes keys i..n and none before', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 50_000 }), { minLength: TPB, maxLength: 5 * TPB }),
        fc.nat(),
        fc.integer({ min: 1, max: 1000 }),
        (ids, at, delta) => {
          const full = ids.length - (ids.length % TPB);
          const position = at % full;
          const changed = [...ids];
          changed[position] = changed[position]! + delta;
          const before = keysOf(ids, 'acme');
          const after = keysOf(changed, 'acme');
          const block = Math.floor(position / TPB);
          for (let i = 0; i < before.length; i++) {
            if (i < block) expect(after[i]).toBe(before[i]);
            else expect(after[i]).not.toBe(before[i]);
          }
        },
      ),
    );
  });

  it('another engine setting or another worker key: other keys', () => {
    const ids = Array.from({ length: 2 * TPB }, (_, i) => i);
    const other = { ...FINGERPRINT, flashAttention: true };
    expect(keysOf(ids, 'acme', other)[0]).not.toBe(keysOf(ids, 'acme')[0]);
    const otherWorker = new TenantSalts(new KeyRing([{ id: 'w', key: Buffer.alloc(32, 4) }], 'w'));
    expect(otherWorker.of('acme').equals(salts.of('acme'))).toBe(false);
    expect(() => salts.of('')).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});

describe('prefix index', () => {
  it('finds the longest live run; a holder its last user dropped stays found until it expires', () => {
    const index = new PrefixIndex();
    const keys = keysOf(
      Array.from({ length: 3 * TPB }, (_, i) => i),
      'acme',
    );
    index.publish('h', keys.slice(0, 2), 'a');
    index.refer('h', 'b');
    expect(index.longest(keys, () => true)).toEqual({ holderId: 'h', blocks: 2 });
    expect(index.drop('a')).toEqual([]);
    expect(index.drop('b')).toEqual(['h']);
    // Idle: still found, and a lookup's reference keeps it from expiring.
    expect(index.longest(keys, () => true)).toEqual({ holderId: 'h', blocks: 2 });
    index.refer('h', 'c');
    expect(index.expire('h')).toBeUndefined();
    expect(index.drop('c')).toEqual(['h']);
    expect(index.expire('h')).toEqual(keys.slice(0, 2));
    expect(index.longest(keys, () => true)).toBeUndefined();
    expect(index.isHolder('h')).toBe(false);
    expect(index.keyCount).toBe(0);
    expect(index.expire('h')).toBeUndefined();
  });

  it('a holder freed behind its back is never offered', () => {
    const index = new PrefixIndex();
    const keys = keysOf(
      Array.from({ length: TPB }, (_, i) => i),
      'acme',
    );
    index.publish('h', keys, 'a');
    expect(index.longest(keys, () => false)).toBeUndefined();
    expect(index.isHolder('h')).toBe(false);
  });
});
