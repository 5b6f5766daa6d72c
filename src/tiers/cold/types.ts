// The cold tier's public data shapes: who owns a segment, where a block lives on disk, and the manifest
// from which another process holding the master key restores a context (docs/cold-tier.md).

import type { TenantId } from '../../fabric/types';

/** The context offload a segment belongs to. Bound into every block's ciphertext (associated data). */
export interface SegmentOwner {
  tenant: TenantId;
  contextId: string;
  /** The context's version at the offload; an integer in [0, 2^53 - 1]. */
  version: number;
}

/** Where one block lives on disk, and what it must decrypt and checksum to. */
export interface ColdBlockRef {
  /** 32 lowercase hex digits, the segment file's name. */
  segmentId: string;
  /** The block's position in its segment. */
  index: number;
  owner: SegmentOwner;
  /**
   * CRC-32 (zlib) of the block's plaintext, verified after decryption. Absent when the block's reader
   * checks the bytes itself (the tiers: the allocator checks each page against its own checksum as it
   * copies it in), so the store does not sum them a second time; GCM authenticates them either way.
   */
  checksum?: number;
}

/**
 * Blocks a segment is written from without a buffer per block: `copy` puts block `index` into `target`
 * (exactly blockBytes, a staging slot the store then encrypts in place). The tiers copy straight from
 * the allocator's frames.
 */
export interface BlockSource {
  count: number;
  blockBytes: number;
  copy(index: number, target: Uint8Array): void;
}

export interface WriteSegmentOptions {
  /** CRC-32 of each block's plaintext in its ref, checked on read (default true). */
  plaintextChecksums?: boolean;
}

export interface WriteManifestOptions {
  /**
   * The version of the manifest this write replaces, as the writer last wrote or read it; 'none' for a
   * context's first. The write is then a manifest-log record of what changed, created only if no other
   * writer took that version (If-None-Match; link(2) in a directory), on the base the writer read: a
   * fenced-off writer's late write is refused with PreconditionFailed (STALE_HANDLE). 'none' is
   * If-None-Match in a blob store; a directory writes a first base regardless. Absent: a whole new base,
   * regardless.
   */
  replaces?: number | 'none';
}

export interface ManifestLayout {
  bytesPerToken: number;
  tokensPerBlock: number;
  /** Always bytesPerToken x tokensPerBlock. */
  blockBytes: number;
}

/** A context in the cold tier: page i of the context is pages[i]. Authenticated and encrypted on disk. */
export interface ContextManifest {
  contextId: string;
  tenant: TenantId;
  version: number;
  tokens: number;
  layout: ManifestLayout;
  /**
   * ceil(tokens / tokensPerBlock) refs. Every ref's owner has the manifest's tenant; its contextId and
   * version may differ (a fork's pages may sit in its parent's segments, an unchanged page in an older
   * offload's segment).
   */
  pages: ColdBlockRef[];
  /**
   * Page i's checksum in the allocator (CRC-32C of its tokens, native/src/core/block_checksum.h): what
   * restoring the page checks its bytes against while it copies them.
   */
  pageChecksums: number[];
  /** ISO-8601 time of the offload, for operators. */
  createdAt: string;
  /**
   * What the context's owner keeps beside its KV (an engine's token ids and fingerprint): opaque to the
   * tiers, a JSON object encrypted with the manifest and always of the same version as its pages.
   */
  attachment?: ContextAttachment;
}

/** A JSON object; the tiers store it and give it back, never look inside. */
export type ContextAttachment = Readonly<Record<string, unknown>>;

export interface ReadManifestOptions {
  /** PERMISSION_DENIED when the manifest belongs to another tenant. */
  expectedTenant?: TenantId;
  /**
   * INTEGRITY when the manifest on disk is older: the caller (the context's workflow) holds the trusted
   * version, which is the only defence against a replayed older manifest (docs/cold-tier.md, "Rollback").
   */
  minVersion?: number;
}

export interface DeleteManifestOptions {
  /**
   * Delete only version `version`, the one the deleter last wrote or adopted: when another writer has
   * written the context since (a worker that adopted it after failover), PreconditionFailed (STALE_HANDLE)
   * and nothing is deleted. Absent: whatever is stored.
   */
  version?: number;
}

export interface OrphanSegmentOptions {
  /**
   * Only report segments whose file is at least this old (default 0). A segment is written before the
   * manifest that references it, so a collector must leave young orphans to offloads still in flight.
   */
  minAgeMs?: number;
}
