// Attack class: bytes that dress as a sealed payload (encoding `binary/encrypted`, data `header || iv ||
// ciphertext || tag`, payload-codec.ts) but were bent or made up: a header with a flipped bit, an unknown
// format, a key id that is empty, not UTF-8 or far too long, a header cut short; unauthenticated metadata
// slipped in beside the encoding; and, sealed with a valid tag by someone holding the key, a plaintext of an
// unknown form, a form-1 body whose encoding length overruns it, a form-0 body that is not a Payload proto.
// Each is refused with a typed FabricError (INTEGRITY, or PERMISSION_DENIED for a key id the ring lacks),
// never a crash, and no refusal shows the payload's bytes. Real crypto throughout: the header is AES-GCM's
// additional authenticated data, checked here by opening with and without it.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { FabricError } from '../../../src/fabric/errors';
import { CodecKeyRing, EncryptionCodec, sealedKeyIdOf } from '../../../src/security/payload-codec';
import { DataKeys, SALT_BYTES } from '../../../src/security/payload-data-keys';

const SECRET = 'eyJhbGciOiJFZERTQSJ9.stolen-capability.sig';
const ring = new CodecKeyRing([{ id: 'c1', key: randomBytes(32) }]);
const codec = new EncryptionCodec(ring);
const ENCRYPTED = { encoding: Buffer.from('binary/encrypted') };

async function sealedSecret(): Promise<Payload> {
  return (await codec.encode([defaultPayloadConverter.toPayload({ capability: SECRET })]))[0]!;
}

/** What someone holding the key can seal: any plaintext, under a well-formed header and a valid tag. */
function sealRaw(plaintext: Buffer): Payload {
  const { keyId, salt, key } = new DataKeys(ring).forSealing();
  const header = Buffer.concat([Buffer.from([0x01, Buffer.byteLength(keyId)]), Buffer.from(keyId), salt]);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(header);
  const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return { metadata: { ...ENCRYPTED }, data: Buffer.concat([header, iv, ciphertext, cipher.getAuthTag()]) };
}

/** The refusal decoding `payload` meets: a FabricError whose message shows nothing of the secret. */
async function refusal(payload: Payload): Promise<FabricError> {
  const err = await codec.decode([payload]).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FabricError);
  expect((err as Error).message).not.toContain('stolen-capability');
  return err as FabricError;
}

describe('sealed payload header', () => {
  it('is the associated data: the data key opens the ciphertext only with the header as AAD', async () => {
    const sealed = await sealedSecret();
    const data = Buffer.from(sealed.data!);
    const headerEnd = 2 + data[1]! + SALT_BYTES;
    const key = new DataKeys(ring).forOpening('c1', data.subarray(4, headerEnd))!;
    const open = (aad: Buffer | undefined) => {
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(headerEnd, headerEnd + 12));
      if (aad) decipher.setAAD(aad);
      decipher.setAuthTag(data.subarray(data.length - 16));
      return Buffer.concat([decipher.update(data.subarray(headerEnd + 12, data.length - 16)), decipher.final()]);
    };
    expect(open(data.subarray(0, headerEnd)).toString()).toContain(SECRET);
    expect(() => open(undefined)).toThrow();
  });

  it('refuses every single-bit flip in the header: the format, the key id length, the key id, the salt', async () => {
    const sealed = await sealedSecret();
    const headerEnd = 2 + sealed.data![1]! + SALT_BYTES;
    for (let at = 0; at < headerEnd; at++) {
      for (let bit = 0; bit < 8; bit++) {
        const data = Buffer.from(sealed.data!);
        data[at]! ^= 1 << bit;
        const err = await refusal({ ...sealed, data });
        // A flipped key id byte may name an id the ring lacks (PERMISSION_DENIED); anything else fails INTEGRITY.
        const inKeyId = at >= 1 && at < 4;
        expect(inKeyId ? ['INTEGRITY', 'PERMISSION_DENIED'] : ['INTEGRITY']).toContain(err.code);
      }
    }
  });

  it('refuses an unknown format, an empty, non-UTF-8 or unknown key id, and a header or body cut short', async () => {
    const sealed = await sealedSecret();
    const data = Buffer.from(sealed.data!);
    const salt = data.subarray(4, 4 + SALT_BYTES);
    const rest = data.subarray(4 + SALT_BYTES);
    const cases: Array<[string, Buffer, 'INTEGRITY' | 'PERMISSION_DENIED', RegExp]> = [
      ['format 2', Buffer.concat([Buffer.from([0x02]), data.subarray(1)]), 'INTEGRITY', /unknown format/],
      ['format 0', Buffer.concat([Buffer.from([0x00]), data.subarray(1)]), 'INTEGRITY', /unknown format/],
      ['no data', Buffer.alloc(0), 'INTEGRITY', /unknown format/],
      ['format byte alone', Buffer.from([0x01]), 'INTEGRITY', /names no key id/],
      ['empty key id', Buffer.concat([Buffer.from([0x01, 0]), salt, rest]), 'INTEGRITY', /names no key id/],
      ['key id not UTF-8', Buffer.concat([Buffer.from([0x01, 2, 0x63, 0xff]), salt, rest]), 'INTEGRITY', /not UTF-8/],
      ['header cut in the salt', data.subarray(0, 4 + SALT_BYTES - 1), 'INTEGRITY', /header is truncated/],
      ['key id length past the end', Buffer.concat([Buffer.from([0x01, 255]), Buffer.from('c1')]), 'INTEGRITY', /header is truncated/],
      ['no iv, ciphertext or tag', data.subarray(0, 4 + SALT_BYTES), 'INTEGRITY', /truncated/],
      ['shorter than iv and tag', data.subarray(0, 4 + SALT_BYTES + 27), 'INTEGRITY', /truncated/],
      ['a key id the ring lacks', Buffer.concat([Buffer.from([0x01, 2]), Buffer.from('c9'), salt, rest]), 'PERMISSION_DENIED', /'c9'/],
    ];
    for (const [what, forged, code, message] of cases) {
      const err = await refusal({ metadata: { ...ENCRYPTED }, data: forged });
      expect({ what, code: err.code }).toEqual({ what, code });
      expect(err.message).toMatch(message);
    }
  });

  it('names a key id the ring lacks, but no more than 64 characters of it, and sealedKeyIdOf reads it without the key', async () => {
    const sealed = await sealedSecret();
    const id = `${'k'.repeat(64)}${SECRET}`;
    const data = Buffer.concat([Buffer.from([0x01, id.length]), Buffer.from(id), Buffer.from(sealed.data!).subarray(4)]);
    expect(sealedKeyIdOf({ ...sealed, data })).toBe(id);
    const err = await refusal({ ...sealed, data });
    expect(err.code).toBe('PERMISSION_DENIED');
    expect(err.message).toContain(`'${'k'.repeat(64)}'`);
    // Not a sealed payload, or a header that does not parse: no key id.
    expect(sealedKeyIdOf({ metadata: { encoding: Buffer.from('json/plain') }, data })).toBeUndefined();
    expect(sealedKeyIdOf({ ...sealed, data: Buffer.from([0x02, 2, 0x63, 0x31]) })).toBeUndefined();
    expect(sealedKeyIdOf({ ...sealed, data: Buffer.from([0x01, 2, 0x63, 0x31]) })).toBeUndefined();
  });

  it('drops metadata slipped in beside the encoding: it is not authenticated, the decoded payload is what was sealed', async () => {
    const sealed = await sealedSecret();
    const injected = {
      ...sealed,
      metadata: { ...sealed.metadata, encoding: Buffer.from('binary/encrypted'), messageType: Buffer.from('x') },
    };
    const [opened] = await codec.decode([injected]);
    expect(Object.keys(opened!.metadata!)).toEqual(['encoding']);
    expect(defaultPayloadConverter.fromPayload(opened!)).toEqual({ capability: SECRET });
  });

  it('property: any bytes under the sealed encoding are refused with a typed error, never opened, never a crash', async () => {
    const headed = fc
      .tuple(fc.constantFrom(0x00, 0x01, 0x02), fc.uint8Array({ minLength: 0, maxLength: 3 }), fc.uint8Array({ maxLength: 120 }))
      .map(([format, id, rest]) => Buffer.concat([Buffer.from([format, id.length]), id, rest]));
    const withRealId = fc.uint8Array({ maxLength: 120 }).map((rest) => Buffer.concat([Buffer.from([0x01, 2, 0x63, 0x31]), rest]));
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.uint8Array({ maxLength: 120 }), headed, withRealId), async (data) => {
        const err = await codec.decode([{ metadata: { ...ENCRYPTED }, data }]).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(FabricError);
        expect(['INTEGRITY', 'PERMISSION_DENIED']).toContain((err as FabricError).code);
      }),
      { numRuns: 400 },
    );
  });
});

describe('sealed plaintext, past a valid tag', () => {
  const form1 = (encoding: string, data: string, length = Buffer.byteLength(encoding)) =>
    Buffer.concat([Buffer.from([0x01, length]), Buffer.from(encoding), Buffer.from(data)]);

  it('opens a well-formed form 2, form 1 and form 0 sealed by hand: the forms are what the codec reads', async () => {
    const [two, one, zero] = await codec.decode([
      sealRaw(Buffer.concat([Buffer.from([0x02]), Buffer.from(JSON.stringify({ capability: SECRET }))])),
      sealRaw(form1('json/plain', JSON.stringify({ capability: SECRET }))),
      sealRaw(Buffer.from([0x00])),
    ]);
    expect(defaultPayloadConverter.fromPayload(two!)).toEqual({ capability: SECRET });
    expect(defaultPayloadConverter.fromPayload(one!)).toEqual({ capability: SECRET });
    expect(zero!.metadata).toEqual({});
    expect(zero!.data?.length ?? 0).toBe(0);
  });

  it('refuses an unknown form, a form-1 body whose encoding length overruns it, and a form 0 that is not a Payload proto', async () => {
    const cases: Array<[string, Buffer, RegExp]> = [
      ['empty plaintext', Buffer.alloc(0), /unknown form/],
      ['form 3', Buffer.concat([Buffer.from([0x03]), form1('json/plain', SECRET).subarray(1)]), /unknown form/],
      ['form 0xff', Buffer.from([0xff, 0x00]), /unknown form/],
      ['form 1 without its length byte', Buffer.from([0x01]), /malformed/],
      ['form 1 length past the body', form1('json/plain', '', 200), /malformed/],
      ['form 1 length one past the body', form1('json/plain', SECRET, 10 + SECRET.length + 1), /malformed/],
      ['form 0, invalid wire type', Buffer.from([0x00, 0x0f]), /malformed/],
      ['form 0, metadata entry past the end', Buffer.from([0x00, 0x0a, 0x10]), /malformed/],
      ['form 0, a tag that never ends', Buffer.concat([Buffer.from([0x00]), Buffer.alloc(11, 0xff)]), /malformed/],
      ['form 0, the secret as bytes', Buffer.concat([Buffer.from([0x00, 0x12, 0xff]), Buffer.from(SECRET)]), /malformed/],
    ];
    for (const [what, plaintext, message] of cases) {
      const err = await refusal(sealRaw(plaintext));
      expect({ what, code: err.code }).toEqual({ what, code: 'INTEGRITY' });
      expect(err.message).toMatch(message);
    }
  });

  it('reads a form-1 length that exactly spans the body as the encoding with no data', async () => {
    const [opened] = await codec.decode([sealRaw(form1('json/plain', ''))]);
    expect(Buffer.from(opened!.metadata!.encoding!).toString()).toBe('json/plain');
    expect(opened!.data?.length ?? 0).toBe(0);
  });
});
