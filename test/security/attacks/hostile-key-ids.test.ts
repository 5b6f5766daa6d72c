// Attack class: key ids and codec keys that lie. A key id names its key in errors, logs, terminals and
// the headers of sealed payloads and tokens, so:
// - the ids a process is given (its codec, signing and trusted keys) match a strict pattern where they are
//   set, in the classes themselves as in the key-list readers, and a codec key is exactly 32 bytes
//   (AES-256): a ring given a key of 0 or 1 bytes would seal with next to no key at all;
// - an id that comes from outside (the key id in a forged sealed header) is escaped wherever it is printed:
//   raw, a newline forges a log line, an ANSI escape rewrites the operator's terminal, and a quote ended
//   the id early, so that the client named the wrong key as missing.
// Each set-time refusal is INVALID_ARGUMENT naming the id (escaped) and never a key's bytes.
import { randomBytes } from 'node:crypto';

import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { describe, expect, it } from 'vitest';

import * as cli from '../../../src/cli/kvfabric';
import { mismatchError, refusalIn } from '../../../src/client/codec-refusals';
import { FabricError } from '../../../src/fabric/errors';
import { CapabilityIssuer } from '../../../src/security/capability-issuer';
import { CapabilityVerifier } from '../../../src/security/capability-verifier';
import { ed25519PublicOf } from '../../../src/security/key-list';
import { CodecKeyRing, EncryptionCodec } from '../../../src/security/payload-codec';
import { refusedPayload } from '../../../src/security/refused-payloads';

/** Control characters, ANSI escapes, line and bidi separators: what must never reach a terminal raw. */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\u2028\u2029]/u;
const ring = new CodecKeyRing([{ id: 'c1', key: randomBytes(32) }]);

function thrown(act: () => unknown): FabricError {
  try {
    act();
  } catch (err) {
    expect(err).toBeInstanceOf(FabricError);
    return err as FabricError;
  }
  throw new Error('accepted');
}

/** A payload dressed as sealed under `keyId` (header 0x01 || length || id || salt, then junk): no key needed. */
function forgedUnder(keyId: string): Payload {
  const id = Buffer.from(keyId, 'utf8');
  const data = Buffer.concat([Buffer.from([0x01, id.length]), id, randomBytes(16), randomBytes(12 + 40 + 16)]);
  return { metadata: { encoding: Buffer.from('binary/encrypted') }, data };
}

async function decodeRefusal(payload: Payload): Promise<FabricError> {
  const err = await new EncryptionCodec(ring).decode([payload]).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FabricError);
  return err as FabricError;
}

describe('attack: codec keys of the wrong size', () => {
  it.each([0, 1, 16, 31, 33, 64])('a ring refuses a %i-byte key: INVALID_ARGUMENT naming the id, not the bytes', (bytes) => {
    const key = randomBytes(bytes);
    const err = thrown(() => new CodecKeyRing([{ id: 'short-1', key }]));
    expect(err).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(err.message).toBe(`payload codec key 'short-1' must be 32 bytes (AES-256), got ${bytes}`);
    if (bytes > 0) expect(err.message).not.toContain(key.toString('base64'));
  });

  it('refuses a key that is not bytes at all, and accepts 32 bytes', () => {
    expect(thrown(() => new CodecKeyRing([{ id: 'k', key: 'x'.repeat(32) as never }]))).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(new CodecKeyRing([{ id: 'k', key: randomBytes(32) }]).activeKeyId).toBe('k');
  });
});

describe('attack: key ids set with control characters, quotes or paths', () => {
  const HOSTILE = [
    'k1\n2025-01-01 worker admitted',
    '\u001b[31mk1',
    "k1'",
    'k 1',
    'clé',
    '',
    'x'.repeat(65),
    '../k1',
    '.k1',
    '-k1',
    'k\u202e1',
  ];
  const signingKey = randomBytes(32);

  it.each(HOSTILE.map((id) => [JSON.stringify(id), id]))('%s is refused by the codec ring, the issuer and the verifier', (_name, id) => {
    for (const build of [
      () => new CodecKeyRing([{ id, key: randomBytes(32) }]),
      () => new CapabilityIssuer([{ id, key: signingKey }]),
      () => new CapabilityVerifier([{ id, key: ed25519PublicOf(signingKey) }]),
    ]) {
      const err = thrown(build);
      expect(err).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('must be 1 to 64 letters, digits') });
      expect(err.message).not.toMatch(UNPRINTABLE);
    }
  });

  it('takes the ids keygen writes and the longest the pattern allows', () => {
    for (const id of ['codec-20250101-3f2a9c', 'test-codec-1', 'k', 'A.b_c-9', 'x'.repeat(64)])
      expect(new CodecKeyRing([{ id, key: randomBytes(32) }]).activeKeyId).toBe(id);
  });
});

describe('attack: a forged sealed header names a hostile key id', () => {
  const forgedId = 'k2\n\u001b[2J\u001b[31mWORKER COMPROMISED\u001b[0m\r';

  it("the worker's refusal prints the id escaped: no control character, no ANSI escape", async () => {
    const err = await decodeRefusal(forgedUnder(forgedId));
    expect(err).toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(err.message).not.toMatch(UNPRINTABLE);
    expect(err.message).toBe(
      "payload sealed with key 'k2\\x0a\\x1b[2J\\x1b[31mWORKER COMPROMISED\\x1b[0m\\x0d', which this process does not hold",
    );
  });

  it('the client names the key the header named, quote and all, never another one, and prints it escaped', async () => {
    // The id a client with the old parser read as 'k2': it then named k2 as the key its workers lack.
    const quoted = "k2', which this process does not hold; key 'c1";
    for (const keyId of [quoted, forgedId]) {
      const refusal = refusalIn(Buffer.from(refusedPayload(await decodeRefusal(forgedUnder(keyId))).metadata!.encoding!).toString());
      expect(refusal?.keyId).toBe(keyId);
      for (const by of ['worker', 'client'] as const) {
        const message = mismatchError('victim', refusal!, by, 'c1').message;
        expect(message).not.toMatch(UNPRINTABLE);
        expect(message).toContain(
          `payload codec key '${keyId.replace(/'/g, "\\'").replace(/\n/g, '\\x0a').replaceAll('\u001b', '\\x1b').replace(/\r/g, '\\x0d')}'`,
        );
      }
    }
  });

  it("`kvfabric list` prints a skipped agent's line with its ids escaped", async () => {
    const err = await decodeRefusal(forgedUnder(forgedId));
    const reason = refusalIn(Buffer.from(refusedPayload(err).metadata!.encoding!).toString())!.reason;
    const line = cli.skippedLine({ agentId: 'a\u001b[1Ab', workflowId: 'kvagent-a', status: 'RUNNING', reason });
    expect(line).not.toMatch(UNPRINTABLE);
    expect(line.startsWith('kvfabric: skipped agent a\\x1b[1Ab (RUNNING): payload sealed with key ')).toBe(true);
  });

  it('a sealed payload of our own still opens: its id is one we set', async () => {
    const codec = new EncryptionCodec(ring);
    const sealed = await codec.encode([defaultPayloadConverter.toPayload({ ok: true })]);
    expect(defaultPayloadConverter.fromPayload((await codec.decode(sealed))[0]!)).toEqual({ ok: true });
  });
});
