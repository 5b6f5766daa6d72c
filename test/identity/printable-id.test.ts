// Ids from outside printed into errors, logs and terminals (printable-id.ts): quoted, escaped, one inert
// line, and read back exactly by the client that parses a refusal.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { printable, QUOTED_ID, quotedId, unquoteId } from '../../src/identity/printable-id';

/** Control characters, ANSI escapes, line and bidi separators: what must never reach a terminal raw. */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\u2028\u2029]/u;

describe('quotedId', () => {
  it('leaves the ids kvfabric sets as they are', () => {
    for (const id of ['codec-20250101-3f2a9c', 'test-codec-1', 'A.b_c-9']) expect(quotedId(id)).toBe(`'${id}'`);
  });

  it("escapes quotes, backslashes and control characters: 'k\\'1\\x0a\\x1b\\\\'", () => {
    expect(quotedId("k'1\n\u001b\\")).toBe("'k\\'1\\x0a\\x1b\\\\'");
    expect(quotedId('a\u202eb\u{e0001}')).toBe("'a\\u202eb\\u{e0001}'");
  });

  it('any id prints on one inert line and reads back exactly, up to 64 UTF-16 units (property)', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 80, unit: 'binary' }), (id) => {
        const printed = quotedId(id);
        expect(printed).not.toMatch(UNPRINTABLE);
        expect(unquoteId(QUOTED_ID.exec(`key ${printed}, which`)![1]!)).toBe(id.slice(0, 64));
      }),
      { numRuns: 500 },
    );
  });
});

describe('printable', () => {
  it('escapes only what a terminal should not get raw', () => {
    expect(printable("payload sealed with key 'k1', which this client does not hold")).toBe(
      "payload sealed with key 'k1', which this client does not hold",
    );
    expect(printable('a\u001b[2Jb\r\nc')).toBe('a\\x1b[2Jb\\x0d\\x0ac');
  });
});
