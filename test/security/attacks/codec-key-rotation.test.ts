// Attack class: nonce reuse under a long-lived key. AES-GCM with random 96-bit IVs is safe for at most
// 2^32 seals per key (NIST SP 800-38D, 8.3); the codec key is shared by every client and worker for months.
// The codec never seals under that key: each codec instance derives a data key (HKDF-SHA256, random 128-bit
// salt carried in the sealed payload's header) and derives a fresh one after a bound of seals (2^31 by
// default; small here, injected). Shown with real crypto: the bound is crossed and a new key is used, every
// payload still opens (in this process and in another), and an altered, missing or short salt, or a
// relabelled key id, is refused with a typed error. (Attacks on the rest of the format:
// sealed-payload-format.test.ts.)
import { createDecipheriv, randomBytes } from 'node:crypto';

import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { FabricError } from '../../../src/fabric/errors';
import { CodecKeyRing, EncryptionCodec } from '../../../src/security/payload-codec';
import { DEFAULT_SEALS_PER_DATA_KEY, SALT_BYTES } from '../../../src/security/payload-data-keys';

const k1 = { id: 'c1', key: randomBytes(32) };
const ring = new CodecKeyRing([k1]);
const payloadOf = (value: unknown): Payload => defaultPayloadConverter.toPayload(value);

/** A sealed payload's data cut at the header's fields: 0x01, key id length, key id, salt; then iv || ciphertext || tag. */
function partsOf(payload: Payload) {
  const data = Buffer.from(payload.data!);
  const idEnd = 2 + data[1]!;
  return { keyId: data.subarray(2, idEnd), salt: data.subarray(idEnd, idEnd + SALT_BYTES), sealed: data.subarray(idEnd + SALT_BYTES) };
}
/** The same payload with its header rebuilt from other fields (the sealed bytes after it unchanged). */
function withHeader(payload: Payload, keyId: Uint8Array, salt: Uint8Array): Payload {
  const header = Buffer.concat([Buffer.from([0x01, keyId.length]), keyId, salt]);
  return { ...payload, data: Buffer.concat([header, partsOf(payload).sealed]) };
}
const saltOf = (payload: Payload) => partsOf(payload).salt.toString('hex');

async function refusal(codec: EncryptionCodec, payload: Payload): Promise<FabricError> {
  const err = await codec.decode([payload]).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FabricError);
  return err as FabricError;
}

describe('payload data keys', () => {
  it('derives a fresh data key once the bound of seals is crossed; old and new payloads still open, here and in another process', async () => {
    const codec = new EncryptionCodec(ring, { sealsPerDataKey: 3 });
    const sealed: Payload[] = [];
    for (let i = 0; i < 4; i++) sealed.push(...(await codec.encode([payloadOf({ i })])));
    sealed.push(...(await codec.encode([5, 6, 7].map((i) => payloadOf({ i })))));
    const salts = sealed.map(saltOf);
    // Seals 1-3 under the first key, 4-6 under the second, the 7th under a third.
    expect(new Set(salts.slice(0, 3)).size).toBe(1);
    expect(new Set(salts.slice(3, 6)).size).toBe(1);
    expect(new Set([salts[0], salts[3], salts[6]]).size).toBe(3);
    expect(SALT_BYTES).toBe(16);
    expect(sealed.every((p) => Object.keys(p.metadata!).length === 1 && partsOf(p).keyId.toString() === 'c1')).toBe(true);
    // The same codec, and a codec of another process holding the same ring, open all of them.
    for (const opener of [codec, new EncryptionCodec(ring)]) {
      expect((await opener.decode(sealed)).map((p) => defaultPayloadConverter.fromPayload(p))).toEqual(
        [0, 1, 2, 3, 5, 6, 7].map((i) => ({ i })),
      );
    }
  });

  it('never seals under the operator key itself, and two processes never share a data key', async () => {
    const [first] = await new EncryptionCodec(ring).encode([payloadOf('x')]);
    const [second] = await new EncryptionCodec(ring).encode([payloadOf('x')]);
    expect(saltOf(first!)).not.toBe(saltOf(second!));
    // Opened as the format says (header as AAD, iv, ciphertext, tag) but with the operator key: the tag fails.
    const { sealed } = partsOf(first!);
    const direct = createDecipheriv('aes-256-gcm', k1.key, sealed.subarray(0, 12));
    direct.setAAD(Buffer.from(first!.data!).subarray(0, first!.data!.length - sealed.length));
    direct.setAuthTag(sealed.subarray(sealed.length - 16));
    direct.update(sealed.subarray(12, sealed.length - 16));
    expect(() => direct.final()).toThrow();
  });

  it('refuses an altered, missing or short salt (INTEGRITY), and a relabelled key id (PERMISSION_DENIED or INTEGRITY)', async () => {
    const twin = new CodecKeyRing([k1, { id: 'c1-twin', key: k1.key }]);
    const codec = new EncryptionCodec(twin);
    const [sealed] = (await codec.encode([payloadOf({ secret: 'capability' })])) as [Payload];
    const { keyId, salt } = partsOf(sealed);
    const flipped = Buffer.from(salt);
    flipped[0]! ^= 1;
    for (const forged of [
      withHeader(sealed, keyId, flipped),
      withHeader(sealed, keyId, new Uint8Array()),
      withHeader(sealed, keyId, salt.subarray(0, 8)),
      { ...sealed, data: Buffer.from(sealed.data!).subarray(0, 2 + keyId.length + 8) },
    ]) {
      const err = await refusal(codec, forged);
      expect(err.code).toBe('INTEGRITY');
      expect(err.message).not.toContain('capability');
    }
    // The same key bytes under another id derive another key: the id is bound.
    expect((await refusal(codec, withHeader(sealed, Buffer.from('c1-twin'), salt))).code).toBe('INTEGRITY');
    expect((await refusal(codec, withHeader(sealed, Buffer.from('c9'), salt))).code).toBe('PERMISSION_DENIED');
    // The untouched payload still opens: nothing was consumed or changed by the refusals.
    expect(defaultPayloadConverter.fromPayload((await codec.decode([sealed]))[0]!)).toEqual({ secret: 'capability' });
  });

  it('keeps the default bound at 2^31 (half the SP 800-38D limit) and refuses a bound past it', () => {
    expect(DEFAULT_SEALS_PER_DATA_KEY).toBe(2 ** 31);
    for (const bad of [0, -1, 1.5, 2 ** 31 + 1, Number.NaN])
      expect(() => new EncryptionCodec(ring, { sealsPerDataKey: bad })).toThrow(RangeError);
  });

  it('property: whatever the bound and the batches, no data key seals more than the bound, keys are used in turn, and everything opens', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 6 }),
        fc.array(fc.array(fc.jsonValue(), { maxLength: 5 }), { maxLength: 8 }),
        async (bound, batches) => {
          const codec = new EncryptionCodec(ring, { sealsPerDataKey: bound });
          const sealed: Payload[] = [];
          for (const batch of batches) sealed.push(...(await codec.encode(batch.map(payloadOf))));
          const salts = sealed.map(saltOf);
          const uses = new Map<string, number>();
          for (const salt of salts) uses.set(salt, (uses.get(salt) ?? 0) + 1);
          expect([...uses.values()].every((n) => n <= bound)).toBe(true);
          expect(uses.size).toBe(Math.ceil(salts.length / bound));
          // A key once retired never seals again: each salt's seals are consecutive.
          expect(salts.filter((salt, i) => i > 0 && salt !== salts[i - 1]).length).toBe(Math.max(0, uses.size - 1));
          const opened = (await new EncryptionCodec(ring).decode(sealed)).map((p) => defaultPayloadConverter.fromPayload(p));
          expect(opened).toEqual(batches.flat().map((value) => defaultPayloadConverter.fromPayload(payloadOf(value))));
        },
      ),
      { numRuns: 60 },
    );
  });
});
