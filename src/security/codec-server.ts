// A codec server (Temporal's remote codec protocol): POST /encode and /decode take and return
// `{ payloads: [{ metadata: { k: base64 }, data: base64 }] }` through the payload codec, so the Web UI and
// the CLI (`--codec-endpoint`, `--codec-auth`) show decoded history to whoever holds the codec
// credentials, and ciphertext to everyone else. CORS answers only the configured UI origin.
//
// Credentials: `Authorization: Bearer <token>`, or the token as the endpoint's first path segment
// (`http://host:port/<token>/decode`) for UIs that cannot send a header -- the dev server's UI without an
// identity provider has no access token to pass. Either is compared in constant time.
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import type { Payload, PayloadCodec } from '@temporalio/common';

const MAX_BODY_BYTES = 4 * 1024 * 1024;

export interface CodecServerOptions {
  codec: PayloadCodec;
  /** Bearer token callers must present (at least 16 characters). */
  token: string;
  /** The Web UI's origin, e.g. http://localhost:8233; CORS headers go to it alone. */
  uiOrigin?: string;
  host?: string;
  port?: number;
}

export interface CodecServer {
  /** Base URL; the UI's codec endpoint is `${url}/${token}` when it cannot send a bearer token. */
  url: string;
  close(): Promise<void>;
}

export async function startCodecServer(options: CodecServerOptions): Promise<CodecServer> {
  if (options.token.length < 16) throw new Error('codec server token must be at least 16 characters');
  const expected = digest(options.token);
  const server: Server = createServer((req, res) => {
    void handle(req, res).catch(() => reply(res, 500, { message: 'codec error' }));
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const origin = req.headers.origin;
    if (options.uiOrigin && origin === options.uiOrigin) {
      res.setHeader('Access-Control-Allow-Origin', options.uiOrigin);
      res.setHeader('Access-Control-Allow-Credentials', 'true');
      res.setHeader('Vary', 'Origin');
    }
    if (req.method === 'OPTIONS') {
      // Preflight carries no credentials by design; it only says what the real request may send.
      res.setHeader('Access-Control-Allow-Methods', 'POST, OPTIONS');
      res.setHeader('Access-Control-Allow-Headers', 'Content-Type, X-Namespace, Authorization');
      res.setHeader('Access-Control-Max-Age', '600');
      res.writeHead(204).end();
      return;
    }
    const { path, presented } = credentialsOf(req);
    if (presented === undefined || !timingSafeEqual(digest(presented), expected)) {
      res.setHeader('WWW-Authenticate', 'Bearer');
      reply(res, 401, { message: 'codec credentials required' });
      return;
    }
    if (req.method !== 'POST' || (path !== '/encode' && path !== '/decode')) {
      reply(res, 404, { message: 'POST /encode or /decode' });
      return;
    }
    let payloads: Payload[];
    try {
      payloads = fromJson(await readBody(req));
    } catch {
      reply(res, 400, { message: 'body must be {"payloads": [...]}' });
      return;
    }
    const result = path === '/encode' ? await options.codec.encode(payloads) : await options.codec.decode(payloads).catch(() => undefined);
    if (!result) {
      reply(res, 400, { message: 'a payload could not be decoded with the keys this server holds' });
      return;
    }
    reply(res, 200, { payloads: result.map(toJson) });
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const { address, port } = server.address() as AddressInfo;
  return {
    url: `http://${address.includes(':') ? `[${address}]` : address}:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };

  function credentialsOf(req: IncomingMessage): { path: string; presented?: string } {
    const url = new URL(req.url ?? '/', 'http://codec');
    const bearer = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (bearer !== undefined) return { path: url.pathname, presented: bearer };
    const segments = url.pathname.split('/');
    if (segments.length === 3 && segments[1]) return { path: `/${segments[2]}`, presented: decodeURIComponent(segments[1]) };
    return { path: url.pathname };
  }
}

/** Fixed-length digests make the comparison constant-time whatever length was presented. */
function digest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

function reply(res: ServerResponse, status: number, body: object): void {
  res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new Error('body too large');
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}

function fromJson(text: string): Payload[] {
  const body = JSON.parse(text) as { payloads?: JsonPayload[] };
  if (!Array.isArray(body.payloads)) throw new Error('no payloads');
  return body.payloads.map((p) => ({
    metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(String(v), 'base64')])),
    data: Buffer.from(String(p.data ?? ''), 'base64'),
  }));
}

function toJson(payload: Payload): JsonPayload {
  return {
    metadata: Object.fromEntries(Object.entries(payload.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
    data: Buffer.from(payload.data ?? new Uint8Array()).toString('base64'),
  };
}
