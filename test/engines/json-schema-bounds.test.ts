// The measure a JSON Schema passes before it becomes a grammar: its size as JSON, its enum entries and its
// nesting, each refused INVALID_ARGUMENT naming the schema, with work bounded by the limits whatever the
// input (a cycle, a million-entry array, a string of megabytes).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { checkJsonSchemaBounds, JSON_SCHEMA_LIMITS } from '../../src/engines/json-schema-bounds';
import { FabricError } from '../../src/fabric/errors';

const refusal = (schema: unknown) => {
  try {
    checkJsonSchemaBounds(schema, 'the schema');
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(FabricError);
    expect(err).toMatchObject({ code: 'INVALID_ARGUMENT' });
    return (err as Error).message;
  }
};

describe('checkJsonSchemaBounds', () => {
  it('takes JSON within the size limit and refuses it well past it (escapes count 1 byte, not up to 6) (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), (value) => {
        const bytes = Buffer.byteLength(JSON.stringify(value) ?? 'null');
        const message = refusal(value);
        if (bytes <= JSON_SCHEMA_LIMITS.maxBytes / 2) expect(message ?? '').not.toMatch(/bytes/);
        if (bytes > JSON_SCHEMA_LIMITS.maxBytes * 6) expect(message).toMatch(/bytes of JSON/);
      }),
    );
  });

  it('counts enum entries across the schema', () => {
    const half = { enum: Array.from({ length: 130 }, (_, i) => i) };
    expect(refusal({ type: 'object', properties: { a: half } })).toBeUndefined();
    expect(refusal({ type: 'object', properties: { a: half, b: half } })).toMatch(/260 enum entries or more; at most 256/);
  });

  it('refuses nesting past the limit without recursion, however deep', () => {
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 1_000_000; i++) deep = { a: deep };
    expect(refusal(deep)).toMatch(/nested more than 32 deep/);
  });

  it('stops early on a huge array, a huge string or a cycle', () => {
    expect(refusal({ examples: new Array(2_000_000).fill(0) })).toMatch(/bytes of JSON/);
    expect(refusal({ description: 'x'.repeat(10_000_000) })).toMatch(/bytes of JSON/);
    const cycle: Record<string, unknown> = { type: 'object' };
    cycle.properties = { self: cycle };
    expect(refusal(cycle)).toMatch(/nested|bytes/);
  });

  it('refuses what is not JSON', () => {
    expect(refusal({ default: 1n })).toMatch(/bigint, which is not JSON/);
    expect(refusal({ default: () => 1 })).toMatch(/function, which is not JSON/);
  });
});
