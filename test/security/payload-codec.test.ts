// The payload codec (AES-256-GCM under derived data keys, the sealed format: key id and salt in a header
// that is the associated data, the plaintext's two forms and their exact round trip; key rotation,
// plaintext refused), the data converter's isolation of a refused payload, and the codec server the Web UI
// and CLI decode through (bearer or path credentials, CORS for the UI's origin only). Attacks on both:
// test/security/attacks/codec-*.test.ts and sealed-payload-format.test.ts.
import { createDecipheriv, randomBytes } from 'node:crypto';

import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric/errors';
import { startCodecServer, type CodecServer } from '../../src/security/codec-server';
import { dataConverterOf } from '../../src/security/data-converter';
import { CodecKeyRing, EncryptionCodec, sealedKeyIdOf } from '../../src/security/payload-codec';
import { DataKeys, SALT_BYTES } from '../../src/security/payload-data-keys';

const k1 = { id: 'c1', key: randomBytes(32) };
const k2 = { id: 'c2', key: randomBytes(32) };
const SECRET = { capability: 'eyJhbGciOiJFZERTQSJ9.secret-capability.sig', digest: 'ab'.repeat(32) };
const payload = (): Payload => defaultPayloadConverter.toPayload(SECRET);
const text = (p: Payload) =>
  Buffer.from(p.data ?? []).toString('latin1') +
  JSON.stringify(p.metadata, (_k, v: unknown) => (v instanceof Uint8Array ? Buffer.from(v).toString('latin1') : v));

/** The plaintext inside a sealed payload, opened by hand per the format: header (the AAD), iv, ciphertext, tag. */
function plaintextIn(sealed: Payload, ring: CodecKeyRing): Buffer {
  const data = Buffer.from(sealed.data!);
  const headerEnd = 2 + data[1]! + SALT_BYTES;
  const key = new DataKeys(ring).forOpening(data.subarray(2, 2 + data[1]!).toString(), data.subarray(2 + data[1]!, headerEnd))!;
  const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(headerEnd, headerEnd + 12));
  decipher.setAAD(data.subarray(0, headerEnd));
  decipher.setAuthTag(data.subarray(data.length - 16));
  return Buffer.concat([decipher.update(data.subarray(headerEnd + 12, data.length - 16)), decipher.final()]);
}

/** A payload as the proto carries it: metadata entries and data, an absent field read as empty. */
const wire = (p: Payload) =>
  temporal.api.common.v1.Payload.toObject(temporal.api.common.v1.Payload.fromObject(p), { bytes: String, longs: String });
const bytesOf = (value: fc.Arbitrary<string>) => value.map((v) => Buffer.from(v));

describe('payload codec', () => {
  it('seals payloads so neither data nor metadata shows, and opens them again', async () => {
    const codec = new EncryptionCodec(new CodecKeyRing([k1]));
    const [sealed] = await codec.encode([payload()]);
    expect(text(sealed!)).not.toContain('secret-capability');
    expect(text(sealed!)).not.toContain(SECRET.digest);
    // Only the encoding in the metadata; the data opens with the header: format 1, the key id, the salt.
    expect(Object.keys(sealed!.metadata!)).toEqual(['encoding']);
    expect(Buffer.from(sealed!.metadata!.encoding!).toString()).toBe('binary/encrypted');
    expect([...sealed!.data!.subarray(0, 4)]).toEqual([0x01, 2, ...Buffer.from('c1')]);
    expect(sealed!.data!.length).toBe(4 + SALT_BYTES + 12 + plaintextIn(sealed!, new CodecKeyRing([k1])).length + 16);
    expect(sealedKeyIdOf(sealed!)).toBe('c1');
    expect(sealedKeyIdOf(payload())).toBeUndefined();
    const [opened] = await codec.decode([sealed!]);
    expect(defaultPayloadConverter.fromPayload(opened!)).toEqual(SECRET);
  });

  it("seals a payload whose data comes as a plain array (an update handler's empty result), and opens it as bytes", async () => {
    const codec = new EncryptionCodec(new CodecKeyRing([k1]));
    const empty = { metadata: { encoding: Buffer.from('binary/null') }, data: [] as unknown as Uint8Array };
    const [sealed] = await codec.encode([empty]);
    const [opened] = await codec.decode([sealed!]);
    expect(Buffer.from(opened!.metadata!.encoding!).toString()).toBe('binary/null');
    expect([...(opened!.data ?? [])]).toEqual([]);
  });

  it('rotates: the new active key seals, old payloads still open, a ring without the old key refuses them', async () => {
    const [old] = await new EncryptionCodec(new CodecKeyRing([k1])).encode([payload()]);
    const rotated = new EncryptionCodec(new CodecKeyRing([k1, k2], 'c2'));
    const [fresh] = await rotated.encode([payload()]);
    expect(sealedKeyIdOf(fresh!)).toBe('c2');
    expect((await rotated.decode([old!, fresh!])).map((p) => defaultPayloadConverter.fromPayload(p))).toEqual([SECRET, SECRET]);
    await expect(new EncryptionCodec(new CodecKeyRing([k2])).decode([old!])).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining("'c1'"),
    });
  });

  it('detects tampering and relabelled key ids', async () => {
    const ring = new CodecKeyRing([k1, { id: 'c3', key: k1.key }]);
    const codec = new EncryptionCodec(ring);
    const [sealed] = await codec.encode([payload()]);
    const flipped = Buffer.from(sealed!.data!);
    flipped[20]! ^= 1;
    await expect(codec.decode([{ ...sealed!, data: flipped }])).rejects.toMatchObject({ code: 'INTEGRITY' });
    await expect(codec.decode([{ ...sealed!, data: flipped.subarray(0, 20) }])).rejects.toMatchObject({ code: 'INTEGRITY' });
    // Same key bytes under another id: the key id goes into the data key's derivation and the AAD.
    const relabelled = Buffer.from(sealed!.data!);
    relabelled.write('c3', 2);
    expect(sealedKeyIdOf({ ...sealed!, data: relabelled })).toBe('c3');
    await expect(codec.decode([{ ...sealed!, data: relabelled }])).rejects.toMatchObject({ code: 'INTEGRITY' });
  });

  it('seals JSON in form 2 (data alone), another single encoding in form 1 (encoding, then data), any other in form 0 (the proto)', async () => {
    const ring = new CodecKeyRing([k1]);
    const codec = new EncryptionCodec(ring);
    const [json] = await codec.encode([payload()]);
    expect(plaintextIn(json!, ring)).toEqual(Buffer.concat([Buffer.from([0x02]), payload().data!]));
    const binary: Payload = { metadata: { encoding: Buffer.from('binary/plain') }, data: Buffer.from([1, 2]) };
    const [one] = await codec.encode([binary]);
    expect(plaintextIn(one!, ring)).toEqual(Buffer.from([0x01, 12, ...Buffer.from('binary/plain'), 1, 2]));
    expect(wire((await codec.decode([one!]))[0]!)).toEqual(wire(binary));
    const withMore: Payload = { metadata: { encoding: Buffer.from('json/plain'), messageType: Buffer.from('x') }, data: payload().data! };
    const longEncoding: Payload = { metadata: { encoding: Buffer.alloc(256, 0x61) }, data: Buffer.from('1') };
    // The SDK's external storage reference: its details must survive, so the whole proto is sealed.
    const reference: Payload = {
      metadata: { encoding: Buffer.from('json/plain') },
      data: Buffer.from('{}'),
      externalPayloads: [temporal.api.common.v1.Payload.ExternalPayloadDetails.fromObject({ sizeBytes: 9000 })],
    };
    for (const other of [withMore, longEncoding, reference, { metadata: {}, data: Buffer.from('1') }]) {
      const [sealed] = await codec.encode([other]);
      expect(plaintextIn(sealed!, ring)).toEqual(
        Buffer.concat([Buffer.from([0x00]), temporal.api.common.v1.Payload.encode(other).finish()]),
      );
      expect(wire((await codec.decode([sealed!]))[0]!)).toEqual(wire(other));
    }
  });

  it('property: decoding restores exactly the payload that was encoded, in any form', async () => {
    const ring = new CodecKeyRing([k1]);
    const codec = new EncryptionCodec(ring);
    const data = fc.option(fc.uint8Array({ maxLength: 300 }), { nil: undefined });
    const encoding = fc.oneof(fc.constant('json/plain'), fc.string({ maxLength: 300, unit: 'binary' }));
    const encodingOnly = fc.record({ metadata: fc.record({ encoding: bytesOf(encoding) }), data });
    const anyMetadata = fc.record({ metadata: fc.dictionary(fc.string({ maxLength: 20 }), fc.uint8Array({ maxLength: 40 })), data });
    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof(encodingOnly, anyMetadata), { minLength: 1, maxLength: 4 }), async (payloads) => {
        const sealed = await codec.encode(payloads);
        const opened = await new EncryptionCodec(ring).decode(sealed);
        expect(opened.map(wire)).toEqual(payloads.map(wire));
        for (const [i, p] of payloads.entries()) {
          const names = Object.keys(p.metadata);
          const single = names.length === 1 && names[0] === 'encoding' && p.metadata.encoding!.length <= 255;
          const json = single && Buffer.from(p.metadata.encoding!).toString() === 'json/plain';
          expect(plaintextIn(sealed[i]!, ring)[0]).toBe(json ? 0x02 : single ? 0x01 : 0x00);
        }
      }),
      { numRuns: 200 },
    );
  });

  it('refuses to build a ring with a key id outside the key id pattern (1 to 64 of [A-Za-z0-9._-]): the header names it', async () => {
    const key = randomBytes(32);
    for (const id of ['', 'é'.repeat(128), 'x'.repeat(65), '\uD800'])
      expect(() => new CodecKeyRing([{ id, key }])).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/must be 1 to 64 letters, digits/) }),
      );
    const longest = 'x'.repeat(64);
    const ring = new CodecKeyRing([{ id: longest, key }]);
    const [sealed] = await new EncryptionCodec(ring).encode([payload()]);
    expect(sealedKeyIdOf(sealed!)).toBe(longest);
    expect(defaultPayloadConverter.fromPayload((await new EncryptionCodec(ring).decode([sealed!]))[0]!)).toEqual(SECRET);
  });

  it("refuses a payload it did not seal (PERMISSION_DENIED), except the SDK's bare binary/null", async () => {
    const codec = new EncryptionCodec(new CodecKeyRing([k1]));
    const bareNull = defaultPayloadConverter.toPayload(undefined);
    expect(Buffer.from(bareNull.metadata!.encoding!).toString()).toBe('binary/null');
    expect(await codec.decode([bareNull])).toEqual([bareNull]);
    const plaintexts: Payload[] = [
      payload(),
      defaultPayloadConverter.toPayload(new Uint8Array([1, 2, 3])),
      { metadata: {}, data: Buffer.from('{}') },
      {},
      // binary/null carrying data, or other metadata, is not the SDK's undefined.
      { ...bareNull, data: Buffer.from(SECRET.capability) },
      { metadata: { ...bareNull.metadata, capability: Buffer.from(SECRET.capability) } },
    ];
    for (const plaintext of plaintexts) {
      const err = await codec.decode([plaintext]).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(FabricError);
      expect(err).toMatchObject({ code: 'PERMISSION_DENIED', message: expect.stringContaining('plaintext payload was refused') });
      expect((err as Error).message).not.toContain('secret-capability');
    }
  });
});

describe('data converter', () => {
  it('keeps a refusal with the payload that caused it: that payload fails to convert naming the code, the others open', async () => {
    const ring = new CodecKeyRing([k1]);
    const [codec] = dataConverterOf(ring).payloadCodecs!;
    const [sealed] = await new EncryptionCodec(ring).encode([payload()]);
    const [opened, refused] = await codec!.decode([sealed!, payload()]);
    expect(defaultPayloadConverter.fromPayload(opened!)).toEqual(SECRET);
    expect(() => defaultPayloadConverter.fromPayload(refused!)).toThrow(
      /Unknown encoding: kvfabric-refused PERMISSION_DENIED \(a plaintext payload was refused/,
    );
    // Nothing of the refused payload is kept: it cannot be read back by another converter either.
    expect(refused!.data).toHaveLength(0);
    expect(text(refused!)).not.toContain('secret-capability');
    // A sealed payload that fails authentication is kept in its place the same way, as INTEGRITY.
    const forged = { metadata: { ...sealed!.metadata }, data: randomBytes(sealed!.data!.length) };
    const [refusedForgery] = await codec!.decode([forged]);
    expect(() => defaultPayloadConverter.fromPayload(refusedForgery!)).toThrow(/kvfabric-refused INTEGRITY/);
  });
});

describe('codec server', () => {
  const token = randomBytes(24).toString('base64url');
  const uiOrigin = 'http://localhost:8233';
  let server: CodecServer;
  let sealed: Payload;
  beforeAll(async () => {
    const codec = new EncryptionCodec(new CodecKeyRing([k1]));
    server = await startCodecServer({ codec, token, uiOrigin });
    [sealed] = (await codec.encode([payload()])) as [Payload];
  });
  afterAll(async () => server?.close());

  const body = () =>
    JSON.stringify({
      payloads: [
        {
          metadata: Object.fromEntries(Object.entries(sealed.metadata!).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
          data: Buffer.from(sealed.data!).toString('base64'),
        },
      ],
    });
  const post = (path: string, headers: Record<string, string> = {}) =>
    fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Namespace': 'default', ...headers },
      body: body(),
    });

  it('refuses requests without credentials or with wrong ones, saying nothing of the payloads', async () => {
    for (const response of [
      await post('/decode'),
      await post('/decode', { Authorization: 'Bearer wrong-token-wrong-token' }),
      await post('/wrong-token-wrong-token/decode'),
      await post('/decode', { Authorization: `Basic ${token}` }),
    ]) {
      expect(response.status).toBe(401);
      expect(await response.text()).not.toContain('secret-capability');
    }
  });

  it('decodes for a bearer token, and for the token as the endpoint path (UIs without an access token)', async () => {
    for (const response of [
      await post('/decode', { Authorization: `Bearer ${token}`, Origin: uiOrigin }),
      await post(`/${token}/decode`),
    ]) {
      expect(response.status).toBe(200);
      const { payloads } = (await response.json()) as { payloads: Array<{ data: string }> };
      expect(JSON.parse(Buffer.from(payloads[0]!.data, 'base64').toString())).toEqual(SECRET);
    }
    const encoded = await post('/encode', { Authorization: `Bearer ${token}` });
    expect(encoded.status).toBe(200);
    expect(await encoded.text()).not.toContain('secret-capability');
  });

  it("answers CORS preflight for the UI's origin only", async () => {
    const preflight = (origin: string) =>
      fetch(`${server.url}/decode`, {
        method: 'OPTIONS',
        headers: {
          Origin: origin,
          'Access-Control-Request-Method': 'POST',
          'Access-Control-Request-Headers': 'authorization,content-type,x-namespace',
        },
      });
    const ok = await preflight(uiOrigin);
    expect(ok.status).toBe(204);
    expect(ok.headers.get('access-control-allow-origin')).toBe(uiOrigin);
    expect(ok.headers.get('access-control-allow-headers')).toMatch(/Authorization/);
    expect(ok.headers.get('access-control-allow-methods')).toMatch(/POST/);
    const other = await preflight('http://evil.example');
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
  });
});
