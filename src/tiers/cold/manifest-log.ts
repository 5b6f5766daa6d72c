// The manifest log: a context's manifest is a sealed base (manifest-file.ts) plus sealed records, one per
// later version, each holding only what that version changed (the pages from the first one that differs,
// their checksums, and the attachment's change: a token-id array that grew is stored as its tail). A
// record is sealed like a manifest, under its own magic and associated data that bind its sequence number
// (the version it makes) and its context, and it names the SHA-256 of the record before it (the base's
// sealed bytes for the first), so the chain cannot be reordered, cut in the middle, or spliced from
// another chain. A base written from the log (a compaction) carries the digest of the record it replaces,
// so records another writer chained to that record still follow it. Layout and guarantees:
// docs/cold-tier.md, "Manifest log".
import { createHash } from 'node:crypto';

import { FabricError } from '../../fabric/errors';
import { manifestLogAad } from './associated-data';
import type { CryptoPool } from './crypto-pool';
import type { KeyRing } from './key-ring';
import { openRecord, sealRecord } from './manifest-file';
import type { ColdBlockRef, ContextAttachment, ContextManifest } from './types';

export const MANIFEST_LOG_MAGIC = Buffer.from('KVFCLOG\0', 'latin1');

/** A change of the attachment: keys set whole, arrays grown by a tail, keys removed; or dropped entirely. */
export interface AttachmentPatch {
  drop?: true;
  set?: Record<string, unknown>;
  append?: Record<string, unknown[]>;
  remove?: string[];
}

/** One record of the log: version `version` of the context, made from the version before it. */
export interface ManifestLogRecord {
  contextId: string;
  tenant: number;
  version: number;
  /**
   * SHA-256 (hex) of the sealed bytes of the record this one follows; after a base, the base's log digest
   * (that of the record it was compacted from), or of its sealed bytes when it has none.
   */
  previous: string;
  tokens: number;
  createdAt: string;
  /** Pages in this version; pages and checksums from index `from` on are in this record. */
  pageCount: number;
  from: number;
  pages: ColdBlockRef[];
  pageChecksums: number[];
  attachment?: AttachmentPatch;
}

export function digestOf(sealed: Uint8Array): string {
  return createHash('sha256').update(sealed).digest('hex');
}

/**
 * What `next` changed since `previous` (its version must be the one after), or undefined when a record
 * cannot say it (another tenant or block layout: a new base is written instead).
 */
export function recordOf(previous: ContextManifest, next: ContextManifest, previousDigest: string): ManifestLogRecord | undefined {
  const same = previous.layout;
  if (
    next.version !== previous.version + 1 ||
    next.tenant !== previous.tenant ||
    next.contextId !== previous.contextId ||
    next.layout.blockBytes !== same.blockBytes ||
    next.layout.bytesPerToken !== same.bytesPerToken ||
    next.layout.tokensPerBlock !== same.tokensPerBlock
  ) {
    return undefined;
  }
  const shared = Math.min(previous.pages.length, next.pages.length);
  let from = 0;
  while (from < shared && previous.pageChecksums[from] === next.pageChecksums[from] && sameRef(previous.pages[from]!, next.pages[from]!))
    from++;
  const patch = attachmentPatch(previous.attachment, next.attachment);
  return {
    contextId: next.contextId,
    tenant: next.tenant,
    version: next.version,
    previous: previousDigest,
    tokens: next.tokens,
    createdAt: next.createdAt,
    pageCount: next.pages.length,
    from,
    pages: next.pages.slice(from),
    pageChecksums: next.pageChecksums.slice(from),
    ...(patch ? { attachment: patch } : {}),
  };
}

/**
 * The manifest `record` makes of `previous`; INTEGRITY when it does not fit it. Not validated as a whole
 * (the reader checks the last one once: checkStoredManifest).
 */
export function applyRecord(previous: ContextManifest, record: ManifestLogRecord, where: string): ContextManifest {
  const integrity = (why: string): never => {
    throw new FabricError('INTEGRITY', `${where} ${why}`);
  };
  if (record.version !== previous.version + 1) integrity(`makes version ${record.version}, not ${previous.version + 1}`);
  if (record.tenant !== previous.tenant) integrity(`belongs to tenant ${record.tenant}, not ${previous.tenant}`);
  if (record.from > previous.pages.length || record.from + record.pages.length !== record.pageCount)
    integrity('does not fit the pages before it');
  const next: ContextManifest = {
    contextId: previous.contextId,
    tenant: previous.tenant,
    version: record.version,
    tokens: record.tokens,
    layout: previous.layout,
    pages: [...previous.pages.slice(0, record.from), ...record.pages],
    pageChecksums: [...previous.pageChecksums.slice(0, record.from), ...record.pageChecksums],
    createdAt: record.createdAt,
  };
  const attachment = record.attachment === undefined ? previous.attachment : patched(previous.attachment, record.attachment, integrity);
  if (attachment !== undefined) next.attachment = attachment;
  return next;
}

/** Seals `record` into the bytes of its blob. */
export function sealLogRecord(record: ManifestLogRecord, keyRing: KeyRing, crypto: CryptoPool): Promise<Buffer> {
  return sealRecord(record, MANIFEST_LOG_MAGIC, (header) => manifestLogAad(header, record.version, record.contextId), keyRing, crypto);
}

/**
 * Opens the record stored as version `sequence` of `contextId`: INTEGRITY when it was sealed for another
 * sequence number or context, or tampered; PERMISSION_DENIED when its key is not in the ring.
 */
export async function openLogRecord(
  file: Buffer,
  contextId: string,
  sequence: number,
  keyRing: KeyRing,
  crypto: CryptoPool,
): Promise<ManifestLogRecord> {
  const where = `context '${contextId}': manifest log record ${sequence}`;
  const value = await openRecord(file, MANIFEST_LOG_MAGIC, (header) => manifestLogAad(header, sequence, contextId), where, keyRing, crypto);
  return checkRecord(value, contextId, sequence, where);
}

function checkRecord(value: unknown, contextId: string, sequence: number, where: string): ManifestLogRecord {
  const r = value as Partial<ManifestLogRecord> | null;
  const count = (n: unknown) => Number.isSafeInteger(n) && (n as number) >= 0;
  const wellFormed =
    typeof r === 'object' &&
    r !== null &&
    r.contextId === contextId &&
    r.version === sequence &&
    count(r.tenant) &&
    typeof r.previous === 'string' &&
    /^[0-9a-f]{64}$/.test(r.previous) &&
    count(r.tokens) &&
    typeof r.createdAt === 'string' &&
    count(r.pageCount) &&
    count(r.from) &&
    Array.isArray(r.pages) &&
    Array.isArray(r.pageChecksums) &&
    r.pageChecksums.length === r.pages.length &&
    (r.attachment === undefined || isPatch(r.attachment));
  if (!wellFormed) throw new FabricError('INTEGRITY', `${where}: content is invalid`);
  return r as ManifestLogRecord;
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function isPatch(value: unknown): value is AttachmentPatch {
  if (!isPlainObject(value)) return false;
  const { drop, set, append, remove } = value as AttachmentPatch;
  return (
    (drop === undefined || drop === true) &&
    (set === undefined || isPlainObject(set)) &&
    (append === undefined || (isPlainObject(append) && Object.values(append).every(Array.isArray))) &&
    (remove === undefined || (Array.isArray(remove) && remove.every((key) => typeof key === 'string')))
  );
}

function sameRef(a: ColdBlockRef, b: ColdBlockRef): boolean {
  return (
    a.segmentId === b.segmentId &&
    a.index === b.index &&
    a.checksum === b.checksum &&
    a.owner.tenant === b.owner.tenant &&
    a.owner.version === b.owner.version &&
    a.owner.contextId === b.owner.contextId
  );
}

const sameJson = (a: unknown, b: unknown) => a === b || JSON.stringify(a) === JSON.stringify(b);

/** The change from `before` to `after`; undefined when there is none. */
function attachmentPatch(before: ContextAttachment | undefined, after: ContextAttachment | undefined): AttachmentPatch | undefined {
  if (after === undefined) return before === undefined ? undefined : { drop: true };
  if (before === undefined) return { set: { ...after } };
  const set: Record<string, unknown> = {};
  const append: Record<string, unknown[]> = {};
  for (const [key, value] of Object.entries(after)) {
    const old = before[key];
    if (Array.isArray(old) && Array.isArray(value) && value.length >= old.length && old.every((item, i) => sameJson(item, value[i]))) {
      if (value.length > old.length) append[key] = value.slice(old.length);
    } else if (!sameJson(old, value)) {
      set[key] = value;
    }
  }
  const remove = Object.keys(before).filter((key) => !Object.hasOwn(after, key));
  const patch: AttachmentPatch = {
    ...(Object.keys(set).length > 0 ? { set } : {}),
    ...(Object.keys(append).length > 0 ? { append } : {}),
    ...(remove.length > 0 ? { remove } : {}),
  };
  return Object.keys(patch).length > 0 ? patch : undefined;
}

function patched(
  before: ContextAttachment | undefined,
  patch: AttachmentPatch,
  integrity: (why: string) => never,
): ContextAttachment | undefined {
  if (patch.drop) return undefined;
  const out: Record<string, unknown> = { ...before };
  // Own data properties, as JSON.parse makes them: a key named __proto__ stays a key.
  const put = (key: string, value: unknown) =>
    Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  for (const key of patch.remove ?? []) delete out[key];
  for (const [key, tail] of Object.entries(patch.append ?? {})) {
    const old = Object.hasOwn(out, key) ? out[key] : undefined;
    if (!Array.isArray(old)) integrity(`appends to '${key}', which is not an array`);
    put(key, [...(old as unknown[]), ...tail]);
  }
  for (const [key, value] of Object.entries(patch.set ?? {})) put(key, value);
  return out;
}
