// A codec server (Temporal's remote codec protocol): POST /encode and /decode take and return
// `{ payloads: [{ metadata: { k: base64 }, data: base64 }] }` through the payload codec, so the Web UI and
// the CLI (`--codec-endpoint`, `--codec-auth`) show decoded history to whoever holds the codec
// credentials, and ciphertext to everyone else. CORS answers only the configured UI origin.
//
// Credentials: `Authorization: Bearer <token>`, or the token as the endpoint's first path segment
// (`http://host:port/<token>/decode`) for UIs that cannot send a header -- the dev server's UI without an
// identity provider has no access token to pass. Either is compared in constant time, from the headers
// alone: a caller without them is answered before its body is read.
//
// One caller must not hold up the others (codec-server-limits.ts): bodies, payload counts and payload
// sizes are capped, work goes in turns of a few payloads with the event loop free between them,
// connections are capped and timed out.
//
// `/decode` opens sealed payloads only; any other payload is returned as it came: it is the caller's own
// bytes and holds nothing of ours, and refusing it would fail the sealed payloads the UI sends with it.
// Plaintext is refused where it would be taken in: by the workers' and clients' codec (payload-codec.ts).
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setImmediate as nextTurn } from 'node:timers/promises';

import { METADATA_ENCODING_KEY, type Payload, type PayloadCodec } from '@temporalio/common';

import { isFabricError } from '../fabric/errors';
import { codecServerLimits, JSON_VALUES_PER_PAYLOAD, LimitExceeded, type CodecServerLimits } from './codec-server-limits';
import { ConnectionCap } from './connection-cap';
import { JsonValueCounter } from './json-value-counter';
import { ENCRYPTED_ENCODING } from './payload-codec';

export interface CodecServerOptions {
  codec: PayloadCodec;
  /** Bearer token callers must present (at least 16 characters). */
  token: string;
  /** The Web UI's origin, e.g. http://localhost:8233; CORS headers go to it alone. */
  uiOrigin?: string;
  host?: string;
  port?: number;
  /** Defaults: DEFAULT_CODEC_SERVER_LIMITS. */
  limits?: Partial<CodecServerLimits>;
}

export interface CodecServer {
  /** Base URL; the UI's codec endpoint is `${url}/${token}` when it cannot send a bearer token. */
  url: string;
  /** Connections open now (never more than limits.maxConnections). */
  connections(): number;
  close(): Promise<void>;
}

interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}

export async function startCodecServer(options: CodecServerOptions): Promise<CodecServer> {
  if (options.token.length < 16) throw new Error('codec server token must be at least 16 characters');
  const limits = codecServerLimits(options.limits);
  const expected = digest(options.token);
  let closing = false;
  const server: Server = createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      // How often Node looks for requests past their headers or request timeout.
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(limits.headersTimeoutMs / 2))),
    },
    (req, res) => {
      cap.requestStarted(req, res);
      void handle(req, res).catch(() => refuse(res, 500, { code: 'UNAVAILABLE', message: 'codec error' }));
    },
  );
  // A silent socket is closed (no 'timeout' listener: Node destroys it), whatever state it is in.
  server.setTimeout(limits.idleTimeoutMs);
  const cap = new ConnectionCap(server, limits.maxConnections);

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const origin = req.headers.origin;
    if (options.uiOrigin && origin === options.uiOrigin) {
      res.setHeader('Access-Control-Allow-Origin', options.uiOrigin);
      res.setHeader('Access-Control-Allow-Credentials', 'true');
      res.setHeader('Vary', 'Origin');
    }
    if (closing) res.setHeader('Connection', 'close');
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
      refuse(res, 401, { code: 'PERMISSION_DENIED', message: 'codec credentials required' });
      return;
    }
    if (req.method !== 'POST' || (path !== '/encode' && path !== '/decode')) {
      refuse(res, 404, { code: 'INVALID_ARGUMENT', message: 'POST /encode or /decode' });
      return;
    }
    let result: string | undefined;
    try {
      const entries = await readPayloads(req, limits);
      result = await convert(entries, path === '/encode' ? 'encode' : 'decode', () => res.destroyed);
    } catch (err) {
      if (err instanceof LimitExceeded)
        refuse(res, 413, { code: 'INVALID_ARGUMENT', limit: err.limit, max: err.max, message: err.message });
      else if (err instanceof BadBody) refuse(res, 400, { code: 'INVALID_ARGUMENT', message: err.message });
      // The codec's own errors name a key id at most, never payload bytes.
      else if (isFabricError(err)) refuse(res, 400, { code: err.code, message: err.message });
      else refuse(res, 400, { code: 'INTEGRITY', message: 'a payload could not be decoded with the keys this server holds' });
      return;
    }
    if (result !== undefined) send(res, 200, result);
  }

  /**
   * The response body, made in turns of `payloadsPerTurn` payloads (each turn's part serialized in that
   * turn), the event loop free between turns; undefined once the caller left.
   */
  async function convert(entries: JsonPayload[], direction: 'encode' | 'decode', gone: () => boolean): Promise<string | undefined> {
    const parts: string[] = [];
    for (let start = 0; start < entries.length; start += limits.payloadsPerTurn) {
      if (start > 0) await nextTurn();
      if (gone()) return undefined;
      const batch = entries.slice(start, start + limits.payloadsPerTurn).map(fromJson);
      let converted: Payload[];
      if (direction === 'encode') {
        converted = await options.codec.encode(batch);
      } else {
        const sealed = batch.filter(isSealed);
        const opened = sealed.length > 0 ? await options.codec.decode(sealed) : [];
        let next = 0;
        converted = batch.map((payload) => (isSealed(payload) ? opened[next++]! : payload));
      }
      parts.push(converted.map((payload) => JSON.stringify(toJson(payload))).join(','));
    }
    return `{"payloads":[${parts.join(',')}]}`;
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const { address, port } = server.address() as AddressInfo;
  return {
    url: `http://${address.includes(':') ? `[${address}]` : address}:${port}`,
    connections: () => cap.size,
    close: () =>
      new Promise<void>((resolve) => {
        closing = true;
        server.close(() => resolve());
        cap.closeIdle();
      }),
  };

  function credentialsOf(req: IncomingMessage): { path: string; presented?: string } {
    let pathname: string;
    try {
      pathname = new URL(req.url ?? '/', 'http://codec').pathname;
    } catch {
      return { path: '' }; // a target no URL parser takes carries no credential either
    }
    const bearer = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (bearer !== undefined) return { path: pathname, presented: bearer };
    const segments = pathname.split('/');
    if (segments.length === 3 && segments[1]) return { path: `/${segments[2]}`, presented: safeDecode(segments[1]) };
    return { path: pathname };
  }
}

class BadBody extends Error {}

/**
 * The request's payload entries, checked against every limit before any is converted: the body's bytes
 * and JSON values while it arrives, then the payload count and each payload's size.
 */
async function readPayloads(req: IncomingMessage, limits: CodecServerLimits): Promise<JsonPayload[]> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > limits.maxBodyBytes) throw bodyTooLarge(limits);
  const maxValues = JSON_VALUES_PER_PAYLOAD * limits.maxPayloads + JSON_VALUES_PER_PAYLOAD;
  const counter = new JsonValueCounter();
  const text = await new Promise<string>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = (err: Error) => {
      // Stop reading, but keep the socket: the 413 still has to go out on it.
      req.off('data', onData);
      req.pause();
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limits.maxBodyBytes) return stop(bodyTooLarge(limits));
      // Past the count the body is refused: read the rest (the caller gets its answer) but keep none of it.
      if (counter.count > maxValues) return;
      counter.feed(chunk);
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(counter.count > maxValues ? '' : Buffer.concat(chunks).toString('utf8')));
    req.once('error', reject);
    // After 'end' this changes nothing; before it, the caller left mid-body.
    req.once('close', () => reject(new BadBody('the request ended before its body did')));
  });
  if (counter.count > maxValues) {
    throw new LimitExceeded(
      'json-values',
      maxValues,
      `the body holds more than ${maxValues} JSON values (at most ${JSON_VALUES_PER_PAYLOAD} per payload)`,
    );
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new BadBody('body must be JSON: {"payloads": [...]}');
  }
  const entries = (body as { payloads?: unknown } | null)?.payloads;
  if (!Array.isArray(entries)) throw new BadBody('body must be {"payloads": [...]}');
  if (entries.length > limits.maxPayloads)
    throw new LimitExceeded(
      'payloads',
      limits.maxPayloads,
      `${entries.length} payloads in one request; the limit is ${limits.maxPayloads}`,
    );
  entries.forEach((entry, i) => {
    const bytes = checkedEntry(entry, i);
    if (bytes > limits.maxPayloadBytes)
      throw new LimitExceeded(
        'payload-bytes',
        limits.maxPayloadBytes,
        `payload ${i} holds about ${bytes} bytes; the limit is ${limits.maxPayloadBytes}`,
      );
  });
  return entries as JsonPayload[];
}

/** Checks an entry's shape; returns about how many bytes its base64 values decode to. */
function checkedEntry(entry: unknown, index: number): number {
  const bad = () => new BadBody(`payload ${index} must be {"metadata": {name: base64}, "data": base64}`);
  if (!entry || typeof entry !== 'object' || Array.isArray(entry)) throw bad();
  const { metadata, data } = entry as { metadata?: unknown; data?: unknown };
  if (data !== undefined && typeof data !== 'string') throw bad();
  if (metadata !== undefined && (!metadata || typeof metadata !== 'object' || Array.isArray(metadata))) throw bad();
  const values = Object.values((metadata ?? {}) as Record<string, unknown>);
  if (values.some((value) => typeof value !== 'string')) throw bad();
  return [data ?? '', ...(values as string[])].reduce((sum, text) => sum + Math.floor((text.length * 3) / 4), 0);
}

function bodyTooLarge(limits: CodecServerLimits): LimitExceeded {
  return new LimitExceeded('body-bytes', limits.maxBodyBytes, `the request body is over ${limits.maxBodyBytes} bytes`);
}

function isSealed(payload: Payload): boolean {
  const encoding = payload.metadata?.[METADATA_ENCODING_KEY];
  return encoding !== undefined && encoding !== null && Buffer.from(encoding).toString('utf8') === ENCRYPTED_ENCODING;
}

/** Fixed-length digests make the comparison constant-time whatever length was presented. */
function digest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

/** A malformed escape in the path is no credential (decodeURIComponent would throw). */
function safeDecode(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

function send(res: ServerResponse, status: number, json: string): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(json) }).end(json);
}

/** An error answer closes the connection: whatever is left of the body is not read. */
function refuse(res: ServerResponse, status: number, body: object): void {
  if (res.headersSent || res.destroyed) return;
  res.setHeader('Connection', 'close');
  send(res, status, JSON.stringify(body));
}

function fromJson(entry: JsonPayload): Payload {
  return {
    metadata: Object.fromEntries(Object.entries(entry.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
    data: Buffer.from(entry.data ?? '', 'base64'),
  };
}

function toJson(payload: Payload): JsonPayload {
  return {
    metadata: Object.fromEntries(Object.entries(payload.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
    data: Buffer.from(payload.data ?? new Uint8Array()).toString('base64'),
  };
}
