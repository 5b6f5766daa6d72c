// Attacks on the codec server's connections, with real sockets: anyone who reaches the port can open
// connections without a credential. A flood of idle ones never pushes the count past the cap (each new
// one replaces the oldest idle one) and never locks a real client out; idle ones and ones that trickle
// their headers are closed by the timeouts, having been sent nothing; and when every connection is in the
// middle of a request, a new one is closed instead of one of them.
import { randomBytes } from 'node:crypto';

import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';

import { startCodecServer, type CodecServer } from '../../../src/security/codec-server';
import { CodecKeyRing, EncryptionCodec } from '../../../src/security/payload-codec';
import { firstResponse, openRaw, payloadsJson, postHead, until, type RawConnection } from './codec-http';

const token = randomBytes(24).toString('base64url');
const codec = new EncryptionCodec(new CodecKeyRing([{ id: 'c1', key: randomBytes(32) }]));
const CAP = 8;
let sealed: Payload;
let server: CodecServer | undefined;
const opened: RawConnection[] = [];

beforeAll(async () => {
  [sealed] = (await codec.encode([defaultPayloadConverter.toPayload({ reply: 'Your name is Ada.' })])) as [Payload];
});
afterEach(async () => {
  for (const conn of opened.splice(0)) conn.socket.destroy();
  await server?.close();
});

/** A real client's decode: a fresh connection (no keep-alive pool), the bearer token. */
async function legitimateDecode(url: string): Promise<number> {
  const response = await fetch(`${url}/decode`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, Connection: 'close' },
    body: payloadsJson([sealed]),
  });
  await response.text();
  return response.status;
}

async function idleConnection(url: string): Promise<RawConnection> {
  const conn = await openRaw(url);
  opened.push(conn);
  return conn;
}

describe('codec server connections', () => {
  it('holds the cap against a flood of idle connections, lets a real client through, and closes the idle ones', async () => {
    server = await startCodecServer({
      codec,
      token,
      limits: { maxConnections: CAP, idleTimeoutMs: 1500, headersTimeoutMs: 1500, requestTimeoutMs: 3000, keepAliveTimeoutMs: 500 },
    });
    const first: RawConnection[] = [];
    for (let i = 0; i < CAP; i++) first.push(await idleConnection(server.url));
    await until(() => server!.connections() === CAP, 'the server to hold every idle connection');

    // Twice the cap again: each new one replaces the oldest idle one, the count never passes the cap.
    const flood: RawConnection[] = [];
    for (let i = 0; i < CAP * 2; i++) {
      flood.push(await idleConnection(server.url));
      expect(server.connections()).toBeLessThanOrEqual(CAP);
    }
    await Promise.all(first.map((conn) => conn.closed));
    expect(server.connections()).toBeLessThanOrEqual(CAP);

    // A real client still gets its answer while the flood holds every slot.
    expect(await legitimateDecode(server.url)).toBe(200);

    // The idle timeout closes every flood connection; none was sent a byte.
    await Promise.all(flood.map((conn) => conn.closed));
    expect([...first, ...flood].map((conn) => conn.received())).toEqual(Array(CAP * 3).fill(''));
    await until(() => server!.connections() === 0, 'no connection left open');
  });

  it('closes a connection that trickles its headers (headers timeout), though it is never silent long enough to be idle', async () => {
    server = await startCodecServer({
      codec,
      token,
      limits: { maxConnections: CAP, idleTimeoutMs: 2000, headersTimeoutMs: 600, requestTimeoutMs: 3000 },
    });
    const slow = await idleConnection(server.url);
    await slow.send('POST /decode HTTP/1.1\r\nHost: codec\r\n');
    for (let i = 0; !slow.isClosed() && i < 100; i++) {
      await slow.send('X');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(slow.isClosed()).toBe(true);
    // Node answers 408 when it can, then closes; either way nothing was decoded or authenticated.
    expect(slow.received()).toMatch(/^(HTTP\/1\.1 408 [^\r]*\r\n[\s\S]*)?$/);
    expect(await legitimateDecode(server.url)).toBe(200);
  });

  it('when every connection is mid-request, closes a new one and lets the requests finish', async () => {
    server = await startCodecServer({ codec, token, limits: { maxConnections: CAP } });
    const body = payloadsJson([sealed]);
    const busy: RawConnection[] = [];
    for (let i = 0; i < CAP; i++) {
      const conn = await idleConnection(server.url);
      // Headers, then (once the server said 100 Continue: its request has begun) half the body: the
      // request is in progress, the server waits for the rest.
      await conn.send(
        postHead('/decode', {
          Authorization: `Bearer ${token}`,
          'Content-Type': 'application/json',
          'Content-Length': Buffer.byteLength(body),
          Connection: 'close',
          Expect: '100-continue',
        }),
      );
      await until(() => conn.received().startsWith('HTTP/1.1 100 Continue\r\n\r\n'), 'the server to take the request');
      await conn.send(body.slice(0, 10));
      busy.push(conn);
    }
    expect(server.connections()).toBe(CAP);

    const extra = await idleConnection(server.url);
    await extra.closed;
    expect(extra.received()).toBe('');
    expect(busy.map((conn) => conn.isClosed())).toEqual(Array(CAP).fill(false));

    for (const conn of busy) await conn.send(body.slice(10));
    await Promise.all(busy.map((conn) => conn.closed));
    for (const conn of busy) {
      const { status, body: answer } = firstResponse(conn.received());
      expect(status).toBe(200);
      expect(JSON.parse(Buffer.from((answer.payloads as Array<{ data: string }>)[0]!.data, 'base64').toString())).toEqual({
        reply: 'Your name is Ada.',
      });
    }
  });
});
