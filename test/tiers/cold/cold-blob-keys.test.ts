// The cold tier's blob keys: every context id the tier takes has one key that the blob store accepts and
// that gives the id back; keys the tier does not make (other cuts, '%', foreign names) name no context.
import { describe, expect, it } from 'vitest';

import { isKey } from '../../../src/blob-store/blob-keys';
import { contextIdOfKey, manifestKey, segmentIdOfKey, segmentKey } from '../../../src/tiers/cold/cold-blob-keys';
import { MAX_CONTEXT_FILE_STEM } from '../../../src/tiers/cold/context-names';

const IDS = [
  'a',
  'agent-1_child',
  'Agent.With.Dots',
  '.hidden',
  '%41',
  'é/../ü',
  '🙂'.repeat(20),
  'x'.repeat(MAX_CONTEXT_FILE_STEM),
  'Y'.repeat(MAX_CONTEXT_FILE_STEM / 3),
];

describe('cold-tier blob keys', () => {
  it('gives every context id a valid key that maps back to it, and distinct ids distinct keys', () => {
    const keys = IDS.map(manifestKey);
    for (const [i, key] of keys.entries()) {
      expect(isKey(key), key).toBe(true);
      expect(contextIdOfKey(key)).toBe(IDS[i]);
    }
    expect(new Set(keys.map((key) => key.toLowerCase())).size).toBe(IDS.length);
  });

  it('names no context for keys it does not make', () => {
    for (const key of [
      'cold/manifests/a.manifest',
      'cold/manifests/ma',
      'cold/manifests/m.4',
      `cold/manifests/m${'x'.repeat(100)}/m${'x'.repeat(140)}.manifest`,
      'cold/segments/ma.manifest',
      'other/manifests/ma.manifest',
    ]) {
      expect(contextIdOfKey(key), key).toBeUndefined();
    }
  });

  it('keys a segment by its id only', () => {
    const id = '0123456789abcdef0123456789abcdef';
    expect(segmentIdOfKey(segmentKey(id))).toBe(id);
    expect(segmentIdOfKey(`cold/segments/${id}.seg.tmp`)).toBeUndefined();
    expect(segmentIdOfKey(`cold/manifests/${id}.seg`)).toBeUndefined();
  });
});
