// Real sockets against a codec server, for the attack tests: raw TCP connections that send exactly the
// bytes a test says (idle ones, half a request, a body that never ends) and record what comes back and
// when the server closes them, and JSON bodies in the codec protocol's shape.
import { connect, type Socket } from 'node:net';

import type { Payload } from '@temporalio/common';

export interface RawConnection {
  socket: Socket;
  /** Everything the server sent so far. */
  received(): string;
  /** Settles when the server (or the test) closed the connection. */
  closed: Promise<void>;
  isClosed(): boolean;
  send(text: string | Buffer): Promise<void>;
}

export async function openRaw(url: string): Promise<RawConnection> {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port) });
  const chunks: Buffer[] = [];
  let closed = false;
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  socket.on('error', () => undefined); // a reset is one way the server closes
  const closedPromise = new Promise<void>((resolve) =>
    socket.once('close', () => {
      closed = true;
      resolve();
    }),
  );
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return {
    socket,
    received: () => Buffer.concat(chunks).toString('latin1'),
    closed: closedPromise,
    isClosed: () => closed,
    send: (text) => new Promise<void>((resolve) => socket.write(text, () => resolve())),
  };
}

/** The head of a POST, without its body. */
export function postHead(path: string, headers: Record<string, string | number>): string {
  return [`POST ${path} HTTP/1.1`, 'Host: codec', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), '', ''].join('\r\n');
}

/** Status and JSON body of the first final response a raw connection received (a 100 Continue skipped). */
export function firstResponse(received: string): { status: number; body: Record<string, unknown> } {
  const text = received.replace(/^HTTP\/1\.1 100 Continue\r\n\r\n/, '');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
  const bodyText = text.slice(text.indexOf('\r\n\r\n') + 4);
  return { status, body: bodyText ? (JSON.parse(bodyText) as Record<string, unknown>) : {} };
}

export function payloadsJson(payloads: Payload[]): string {
  return JSON.stringify({
    payloads: payloads.map((p) => ({
      metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
      data: Buffer.from(p.data ?? []).toString('base64'),
    })),
  });
}

export function payloadsOf(json: { payloads: Array<{ metadata: Record<string, string>; data: string }> }): Payload[] {
  return json.payloads.map((p) => ({
    metadata: Object.fromEntries(Object.entries(p.metadata).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
    data: Buffer.from(p.data, 'base64'),
  }));
}

/** Polls `check` until it holds (a condition on sockets, not a time); fails after `timeoutMs`. */
export async function until(check: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
