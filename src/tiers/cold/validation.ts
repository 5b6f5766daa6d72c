// Argument checks for the cold tier's inputs. Callers may be plain JS, so every field is checked before
// anything touches disk; the same checks re-validate a decrypted manifest, where a failure means the
// file was not written by a compatible store (INTEGRITY, not INVALID_ARGUMENT).

import { FabricError, type ErrorCode } from '../../fabric/errors';
import { contextFileStem, MAX_CONTEXT_FILE_STEM } from './context-names';
import type { BlockSource, ColdBlockRef, ContextAttachment, ContextManifest, SegmentOwner } from './types';

/** An attachment is token ids and a fingerprint: 16 M characters hold a 1M-token context's ids. */
const MAX_ATTACHMENT_CHARS = 16 * 1024 * 1024;

export const MAX_TENANT = 2 ** 32 - 1;
/** UTF-8 bytes of a context id in file headers; implied by the file-name limit (a name takes >= 1 character per byte). */
export const MAX_CONTEXT_ID_BYTES = MAX_CONTEXT_FILE_STEM;
/** Blocks per segment; the segment header's tag table (16 bytes per block) stays under 1 MiB. */
export const MAX_SEGMENT_BLOCKS = 65_536;
/** The allocator's limit on one block. */
export const MAX_BLOCK_BYTES = 2 ** 31;
const SEGMENT_ID = /^[0-9a-f]{32}$/;

/** Names a bad value without calling its toString, which plain-JS callers could make throw. */
export function describe(value: unknown): string {
  if (typeof value === 'number') return String(value);
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}...` : value);
  return value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** Collects the code a failure is reported with: INVALID_ARGUMENT for callers, INTEGRITY for files read back. */
class Checker {
  constructor(
    readonly code: ErrorCode,
    readonly prefix: string,
  ) {}

  fail(message: string): never {
    throw new FabricError(this.code, `${this.prefix}${message}`);
  }

  int(value: unknown, name: string, min: number, max: number): number {
    if (!Number.isSafeInteger(value) || (value as number) < min || (value as number) > max) {
      this.fail(`${name} must be an integer in [${min}, ${max}], got ${describe(value)}`);
    }
    return value as number;
  }

  object(value: unknown, name: string): Record<string, unknown> {
    if (!isObject(value) || Array.isArray(value)) this.fail(`${name} must be an object, got ${describe(value)}`);
    return value;
  }

  contextId(value: unknown, name: string): string {
    if (typeof value !== 'string' || value.length === 0) this.fail(`${name} must be a non-empty string, got ${describe(value)}`);
    // Lone surrogates would encode to U+FFFD, so two different ids could share a file and associated data.
    if (Buffer.from(value, 'utf8').toString('utf8') !== value) this.fail(`${name} must be well-formed Unicode`);
    const stem = contextFileStem(value).length;
    if (stem > MAX_CONTEXT_FILE_STEM) {
      this.fail(
        `${name} ${describe(value)} is too long: its manifest file name needs ${stem} characters, over ${MAX_CONTEXT_FILE_STEM} ` +
          `(lowercase letters, digits, '-' and '_' take one; every other UTF-8 byte takes three)`,
      );
    }
    return value;
  }

  segmentId(value: unknown, name: string): string {
    if (typeof value !== 'string' || !SEGMENT_ID.test(value)) this.fail(`${name} must be 32 lowercase hex digits, got ${describe(value)}`);
    return value;
  }

  owner(value: unknown, name: string): SegmentOwner {
    const o = this.object(value, name);
    return {
      tenant: this.int(o.tenant, `${name}.tenant`, 1, MAX_TENANT),
      contextId: this.contextId(o.contextId, `${name}.contextId`),
      version: this.int(o.version, `${name}.version`, 0, Number.MAX_SAFE_INTEGER),
    };
  }

  ref(value: unknown, name: string): ColdBlockRef {
    const r = this.object(value, name);
    return {
      segmentId: this.segmentId(r.segmentId, `${name}.segmentId`),
      index: this.int(r.index, `${name}.index`, 0, MAX_SEGMENT_BLOCKS - 1),
      owner: this.owner(r.owner, `${name}.owner`),
      ...(r.checksum === undefined ? {} : { checksum: this.int(r.checksum, `${name}.checksum`, 0, 2 ** 32 - 1) }),
    };
  }

  manifest(value: unknown): ContextManifest {
    const m = this.object(value, 'manifest');
    const contextId = this.contextId(m.contextId, 'manifest.contextId');
    const tenant = this.int(m.tenant, 'manifest.tenant', 1, MAX_TENANT);
    const version = this.int(m.version, 'manifest.version', 0, Number.MAX_SAFE_INTEGER);
    const tokens = this.int(m.tokens, 'manifest.tokens', 0, Number.MAX_SAFE_INTEGER);
    const l = this.object(m.layout, 'manifest.layout');
    const bytesPerToken = this.int(l.bytesPerToken, 'manifest.layout.bytesPerToken', 1, MAX_BLOCK_BYTES);
    const tokensPerBlock = this.int(l.tokensPerBlock, 'manifest.layout.tokensPerBlock', 1, MAX_BLOCK_BYTES);
    const blockBytes = this.int(l.blockBytes, 'manifest.layout.blockBytes', 1, MAX_BLOCK_BYTES);
    if (blockBytes !== bytesPerToken * tokensPerBlock) {
      this.fail(`manifest.layout.blockBytes ${blockBytes} must equal bytesPerToken x tokensPerBlock (${bytesPerToken * tokensPerBlock})`);
    }
    if (!Array.isArray(m.pages)) this.fail(`manifest.pages must be an array, got ${describe(m.pages)}`);
    const expectedPages = Math.ceil(tokens / tokensPerBlock);
    if (m.pages.length !== expectedPages) {
      this.fail(`manifest.pages has ${m.pages.length} entries; ${tokens} tokens at ${tokensPerBlock} per block need ${expectedPages}`);
    }
    const pages = m.pages.map((page: unknown, i: number) => {
      const ref = this.ref(page, `manifest.pages[${i}]`);
      // Zero trust: a manifest may only point at its own tenant's blocks.
      if (ref.owner.tenant !== tenant)
        this.fail(`manifest.pages[${i}] belongs to tenant ${ref.owner.tenant}, not the manifest's tenant ${tenant}`);
      return ref;
    });
    if (typeof m.createdAt !== 'string' || m.createdAt.length > 64)
      this.fail(`manifest.createdAt must be a string of at most 64 characters`);
    if (!Array.isArray(m.pageChecksums) || m.pageChecksums.length !== pages.length) {
      this.fail(`manifest.pageChecksums must be an array of ${pages.length} checksums, got ${describe(m.pageChecksums)}`);
    }
    const pageChecksums = (m.pageChecksums as unknown[]).map((sum, i) => this.int(sum, `manifest.pageChecksums[${i}]`, 0, 2 ** 32 - 1));
    const manifest: ContextManifest = {
      contextId,
      tenant,
      version,
      tokens,
      layout: { bytesPerToken, tokensPerBlock, blockBytes },
      pages,
      pageChecksums,
      createdAt: m.createdAt,
    };
    if (m.attachment !== undefined) manifest.attachment = this.attachment(m.attachment, 'manifest.attachment');
    return manifest;
  }

  /** A private copy of a plain JSON object of bounded size. */
  attachment(value: unknown, name: string): ContextAttachment {
    if (!isObject(value) || Array.isArray(value)) this.fail(`${name} must be a JSON object, got ${describe(value)}`);
    let text: string;
    try {
      text = JSON.stringify(value);
    } catch {
      return this.fail(`${name} is not JSON`);
    }
    if (text.length > MAX_ATTACHMENT_CHARS) this.fail(`${name} is ${text.length} characters of JSON, over ${MAX_ATTACHMENT_CHARS}`);
    return JSON.parse(text) as ContextAttachment;
  }
}

const callerChecks = new Checker('INVALID_ARGUMENT', '');

export const checkContextId = (value: unknown, name = 'contextId'): string => callerChecks.contextId(value, name);
export const checkSegmentId = (value: unknown, name = 'segmentId'): string => callerChecks.segmentId(value, name);
export const checkOwner = (value: unknown, name = 'owner'): SegmentOwner => callerChecks.owner(value, name);
export const checkRef = (value: unknown, name: string): ColdBlockRef => callerChecks.ref(value, name);
export const checkTenant = (value: unknown, name: string): number => callerChecks.int(value, name, 1, MAX_TENANT);
export const checkVersion = (value: unknown, name: string): number => callerChecks.int(value, name, 0, Number.MAX_SAFE_INTEGER);
/** A private, validated copy of a caller's manifest. */
export const checkManifest = (value: unknown): ContextManifest => callerChecks.manifest(value);

/** Re-validates a decrypted manifest; failures are INTEGRITY naming the context. */
export function checkStoredManifest(value: unknown, contextId: string): ContextManifest {
  return new Checker('INTEGRITY', `context ${describe(contextId)}: manifest content is invalid: `).manifest(value);
}

/** A block source (BlockSource) or an array of equal blocks, as one source; INVALID_ARGUMENT otherwise. */
export function checkBlockSource(blocks: unknown): BlockSource {
  if (Array.isArray(blocks)) {
    const blockBytes = checkBlocks(blocks);
    const copies = [...blocks] as Uint8Array[];
    return { count: copies.length, blockBytes, copy: (index, target) => target.set(copies[index]!) };
  }
  if (!isObject(blocks) || typeof (blocks as { copy?: unknown }).copy !== 'function') {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `blocks must be an array of Uint8Arrays or a block source { count, blockBytes, copy }, got ${describe(blocks)}`,
    );
  }
  const { count, blockBytes, copy } = blocks as unknown as BlockSource;
  if (!Number.isSafeInteger(count) || count < 1 || count > MAX_SEGMENT_BLOCKS) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `a block source's count must be an integer in [1, ${MAX_SEGMENT_BLOCKS}], got ${describe(count)}`,
    );
  }
  if (!Number.isSafeInteger(blockBytes) || blockBytes < 1 || blockBytes > MAX_BLOCK_BYTES) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `a block source's blockBytes must be an integer in [1, ${MAX_BLOCK_BYTES}], got ${describe(blockBytes)}`,
    );
  }
  return { count, blockBytes, copy: copy.bind(blocks) };
}

/** Blocks of one segment: a non-empty array of equally sized Uint8Arrays. Returns blockBytes. */
function checkBlocks(blocks: unknown): number {
  if (!Array.isArray(blocks) || blocks.length === 0 || blocks.length > MAX_SEGMENT_BLOCKS) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `blocks must be an array of 1 to ${MAX_SEGMENT_BLOCKS} Uint8Arrays, ` +
        `got ${Array.isArray(blocks) ? `${blocks.length} entries` : describe(blocks)}`,
    );
  }
  let blockBytes = 0;
  blocks.forEach((block: unknown, i: number) => {
    if (!(block instanceof Uint8Array))
      throw new FabricError('INVALID_ARGUMENT', `blocks[${i}] must be a Uint8Array, got ${describe(block)}`);
    if (i === 0) blockBytes = block.byteLength;
    if (block.byteLength === 0 || block.byteLength > MAX_BLOCK_BYTES || block.byteLength !== blockBytes) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        `blocks[${i}] has ${block.byteLength} bytes; every block of a segment must have the same size ` +
          `in [1, ${MAX_BLOCK_BYTES}] (blocks[0] has ${blockBytes})`,
      );
    }
  });
  return blockBytes;
}
