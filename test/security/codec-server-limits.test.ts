// The codec server's limits and what they rest on: the defaults and their checks, the JSON value counter
// that bounds JSON.parse's work before it runs (property: fed in any pieces it counts the same, and never
// fewer than the values the text holds), and the codec-server command's --max-connections flag.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { parseCodecServerCall } from '../../src/cli/codec-server-command';
import { CliUsageError } from '../../src/cli/usage-error';
import { codecServerLimits, DEFAULT_CODEC_SERVER_LIMITS } from '../../src/security/codec-server-limits';
import { JsonValueCounter } from '../../src/security/json-value-counter';

/** Values and object members in a parsed JSON value, the root included. */
function valuesIn(value: unknown): number {
  if (Array.isArray(value)) return 1 + value.reduce((sum: number, item) => sum + valuesIn(item), 0);
  if (value && typeof value === 'object') return 1 + Object.values(value).reduce((sum: number, item) => sum + valuesIn(item), 0);
  return 1;
}

function countIn(pieces: Uint8Array[]): number {
  const counter = new JsonValueCounter();
  for (const piece of pieces) counter.feed(piece);
  return counter.count;
}

describe('JSON value counter', () => {
  it('counts brackets and commas outside strings only, escapes included', () => {
    expect(countIn([Buffer.from('{"payloads":[{},{"data":"a,b{c[\\"d,"}]}')])).toBe(5);
    expect(countIn([Buffer.from('"{,[,\\\\",1')])).toBe(1);
  });

  it('property: split anywhere it counts the same, and never fewer than the values less one', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.array(fc.nat(), { maxLength: 6 }), (value, cuts) => {
        const bytes = Buffer.from(JSON.stringify(value));
        const points = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
        const pieces = [0, ...points, bytes.length].slice(1).map((end, i, ends) => bytes.subarray(i === 0 ? 0 : ends[i - 1]!, end));
        const whole = countIn([bytes]);
        expect(countIn(pieces)).toBe(whole);
        expect(whole + 1).toBeGreaterThanOrEqual(valuesIn(value));
      }),
      { numRuns: 300 },
    );
  });
});

describe('codec server limits', () => {
  it('has defaults for a UI or CLI behind it, and refuses nonsense', () => {
    expect(codecServerLimits()).toEqual(DEFAULT_CODEC_SERVER_LIMITS);
    expect(DEFAULT_CODEC_SERVER_LIMITS).toMatchObject({
      maxBodyBytes: 4 * 1024 * 1024,
      maxPayloads: 4096,
      maxPayloadBytes: 2 * 1024 * 1024,
      maxConnections: 128,
    });
    expect(codecServerLimits({ maxConnections: 4 }).maxConnections).toBe(4);
    for (const bad of [
      { maxPayloads: 0 },
      { idleTimeoutMs: -1 },
      { maxBodyBytes: 1.5 },
      { headersTimeoutMs: 10_000, requestTimeoutMs: 5000 },
    ]) {
      expect(() => codecServerLimits(bad)).toThrow(RangeError);
    }
  });

  it('takes --max-connections from the codec-server command, and refuses a bad one as a usage error', () => {
    expect(parseCodecServerCall([]).maxConnections).toBe(DEFAULT_CODEC_SERVER_LIMITS.maxConnections);
    expect(parseCodecServerCall(['--max-connections', '16']).maxConnections).toBe(16);
    for (const bad of ['0', 'many', '-3', '70000']) expect(() => parseCodecServerCall(['--max-connections', bad])).toThrow(CliUsageError);
  });
});
