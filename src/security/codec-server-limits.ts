// What one caller of the codec server may ask for, and how long a connection may sit: every limit the
// server enforces, with defaults for a Temporal UI or CLI behind it. A request over a limit is answered
// 413 with a JSON body naming the limit (`{ code, limit, max, message }`) and nothing in it is decoded.
export interface CodecServerLimits {
  /** Request body, bytes. */
  maxBodyBytes: number;
  /** Payloads in one request (the UI and the CLI send one event's, or one field's, at a time). */
  maxPayloads: number;
  /** One payload's data and metadata values, decoded bytes (Temporal's own blob limit is 2 MiB). */
  maxPayloadBytes: number;
  /** Payloads decoded or encoded between two turns of the event loop, so other callers are answered meanwhile. */
  payloadsPerTurn: number;
  /** Open connections. At the cap a new one replaces the oldest with no request in progress, else is closed. */
  maxConnections: number;
  /** A connection that sends nothing for this long is closed, before, during or between requests. */
  idleTimeoutMs: number;
  /** The request line and headers must have arrived this long after the request began. */
  headersTimeoutMs: number;
  /** The whole request must have arrived this long after it began. */
  requestTimeoutMs: number;
  /** A kept-alive connection waits this long for its next request. */
  keepAliveTimeoutMs: number;
}

export const DEFAULT_CODEC_SERVER_LIMITS: Readonly<CodecServerLimits> = {
  maxBodyBytes: 4 * 1024 * 1024,
  maxPayloads: 4096,
  maxPayloadBytes: 2 * 1024 * 1024,
  payloadsPerTurn: 64,
  maxConnections: 128,
  idleTimeoutMs: 10_000,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 5_000,
};

/**
 * JSON values and object members one payload may take in a body: the payload object, its metadata object
 * and entries, its data. Counted while the body arrives (json-value-counter.ts), so a body of a million
 * tiny values is refused before JSON.parse spends its time on it.
 */
export const JSON_VALUES_PER_PAYLOAD = 16;

export type LimitName = 'body-bytes' | 'json-values' | 'payloads' | 'payload-bytes';

/** A request over one of the limits; the server answers it with 413. */
export class LimitExceeded extends Error {
  constructor(
    readonly limit: LimitName,
    readonly max: number,
    message: string,
  ) {
    super(message);
    this.name = 'LimitExceeded';
  }
}

export function codecServerLimits(overrides: Partial<CodecServerLimits> = {}): CodecServerLimits {
  const limits = { ...DEFAULT_CODEC_SERVER_LIMITS, ...overrides };
  for (const [name, value] of Object.entries(limits)) {
    if (!Number.isSafeInteger(value) || value < 1)
      throw new RangeError(`codec server limit ${name} must be a positive whole number, got ${value}`);
  }
  // Node refuses a headers timeout beyond the request timeout; say which setting is wrong instead.
  if (limits.headersTimeoutMs > limits.requestTimeoutMs)
    throw new RangeError('codec server limit headersTimeoutMs must not exceed requestTimeoutMs');
  return limits;
}
