// One worker's agent contexts: the tiered memory, the grants that say who may touch each context, the
// engine that runs message turns, and the byte-level checks a workflow cannot do itself (appending a
// turn's KV, recomputing digests over what a restore brought back). Activities are thin wrappers around this class; it knows nothing of
// Temporal, so the drain at shutdown and tests use it directly.
import type { Engine } from '../engines/engine';
import { syntheticKv } from '../engines/synthetic/synthetic-kv';
import { crc32c } from '../fabric/checksum';
import { FabricError, isFabricError } from '../fabric/errors';
import { bytesPerTokenOf } from '../fabric/layout';
import type { Tier } from '../fabric/tier';
import type { BlockLayout, ModelShape } from '../fabric/types';
import type { CapabilityClaims } from '../security/claims';
import type { GrantStore } from '../shared-directory/grant-store';
import type { HolderFences } from '../shared-directory/holder-fences';
import type { TenantRegistry } from '../shared-directory/tenant-registry';
import type { ColdStore, ContextAttachment } from '../tiers/cold';
import type { TieredMemory } from '../tiers/tiered-memory';
import type { CapabilityCheck, Presented } from './capability-check';
import { pageDigest, type DigestState } from './context-digest';
import type { ContextSnapshot } from './context-snapshot';
import { engineNoteOf, type EngineNote } from './engine-note';
import { ChainDigest, isChainDigest, type ChainDigestState } from './legacy-chain-digest';
import type { AppliedTurn, TurnGeneration, TurnInput, TurnReply } from './turn';

export type TransferDirection = 'append' | 'to-host' | 'to-disk' | 'to-device' | 'recover';

/** What the worker's metrics see; every method is optional work for the caller's bookkeeping only. */
export interface MemoryObserver {
  transferred(direction: TransferDirection, bytes: number): void;
  denied(action: string): void;
  evicted(from: Tier, to: Tier): void;
  /** A turn's checkpoint found the disk full (the turn stays in memory only). */
  checkpointSkipped(): void;
}

/**
 * Verification reads the context in slices of about this size: bounded memory for any context length,
 * and small enough that each read's buffer is cheap to allocate (32 MiB slices read 3x slower here).
 */
const VERIFY_SLICE_BYTES = 8 * 1024 * 1024;

export class AgentMemory {
  /** Tokens verified so far by the running verification of each context (heartbeat progress). */
  private readonly verifying = new Map<string, number>();

  readonly tiers: TieredMemory;
  readonly layout: BlockLayout;
  private readonly grants: GrantStore;
  private readonly capabilities: CapabilityCheck;
  /** Tenant of every context this worker holds: statistics go to one tenant at a time. */
  private readonly tenants = new Map<string, string>();
  private readonly cold: Pick<ColdStore, 'readManifest'>;
  private readonly observer: MemoryObserver | undefined;
  private readonly fences: HolderFences | undefined;
  private readonly tenantIds: TenantRegistry;
  /** The model behind message turns; absent on a worker of the synthetic engine (token-count turns). */
  private readonly engine: Engine | undefined;

  constructor(options: {
    tiers: TieredMemory;
    layout: BlockLayout;
    grants: GrantStore;
    /** Verifies presented tokens (public keys only), epochs and the audit log of denials. */
    capabilities: CapabilityCheck;
    /** The tier layer's cold store: recover checks a manifest's tenant with it before adopting anything. */
    cold: Pick<ColdStore, 'readManifest'>;
    observer?: MemoryObserver;
    /** Claims adopted contexts so a slow former holder cannot overwrite them (holder-fences.ts). */
    fences?: HolderFences;
    /** Tenant names to the allocator's ids, unique across the workers sharing the tier directory. */
    tenantIds: TenantRegistry;
    /** Runs message turns; its hot copy of a context is let go whenever the context leaves the device. */
    engine?: Engine;
  }) {
    this.tiers = options.tiers;
    this.layout = options.layout;
    this.grants = options.grants;
    this.capabilities = options.capabilities;
    this.cold = options.cold;
    this.observer = options.observer;
    this.fences = options.fences;
    this.tenantIds = options.tenantIds;
    this.engine = options.engine;
    // Told by the tier layer itself, foreground or background: nothing to rescan after a call.
    this.tiers.onEviction((eviction) => {
      this.observer?.evicted(eviction.from, eviction.to);
      this.letGo(eviction.contextId);
    });
  }

  // ---- who may touch what ----

  /**
   * The claims of a token that allows the call, whose context's grant agrees with it. PERMISSION_DENIED
   * for any refused token (before the grant is even read), STALE_HANDLE for a context nobody granted.
   */
  async admit(call: Presented): Promise<CapabilityClaims> {
    const claims = await this.capabilities.claimsFor(call);
    const grant = await this.grants.get(call.contextId);
    if (!grant) throw new FabricError('STALE_HANDLE', `no context ${call.contextId}`);
    await this.capabilities.agree(call, grant, claims);
    return claims;
  }

  /** A retry of an operation that revoked its own token (see CapabilityCheck.retryClaimsFor). */
  admitRetry(call: Presented): Promise<CapabilityClaims> {
    return this.capabilities.retryClaimsFor(call);
  }

  /** STALE_HANDLE when this worker does not hold the context (its workflow then fails over). */
  requireHeld(contextId: string): void {
    if (!this.tiers.has(contextId)) throw new FabricError('STALE_HANDLE', `context ${contextId} is not held by this worker`);
  }

  holds(contextId: string): boolean {
    return this.tiers.has(contextId);
  }

  checkShape(shape: ModelShape, tokensPerBlock: number): void {
    const bytesPerToken = bytesPerTokenOf(shape);
    if (bytesPerToken !== this.layout.bytesPerToken || tokensPerBlock !== this.layout.tokensPerBlock) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        `agent model needs ${bytesPerToken} bytes per token and ${tokensPerBlock} tokens per block; ` +
          `this worker's pool has ${this.layout.bytesPerToken} and ${this.layout.tokensPerBlock}`,
      );
    }
  }

  // ---- lifecycle ----

  /**
   * Creates the context and its grant; false when an earlier attempt created it here already. A context of
   * that id granted to another agent or tenant is denied.
   */
  async create(call: Presented, checkpoint: boolean): Promise<boolean> {
    const { contextId } = call;
    const claims = await this.capabilities.claimsFor(call);
    const existing = await this.grants.get(contextId);
    if (existing) await this.capabilities.agree(call, existing, claims);
    if (this.tiers.has(contextId)) return false; // an earlier attempt created it here
    if (!existing) await this.grants.put({ contextId, tenant: claims.ten, agentId: claims.sub, ...forkOf(claims) });
    this.tiers.create(contextId, await this.tenantIds.idOf(claims.ten));
    this.tenants.set(contextId, claims.ten);
    if (checkpoint) await this.tiers.checkpoint(contextId);
    return true;
  }

  /**
   * Adopts a context from its manifest in the cold tier; the manifest must be the caller's tenant's and
   * at least `minVersion` (the newest its workflow saw written): an older one put back is INTEGRITY.
   * With a claim (failover epoch, activity attempt), claims it,
   * fencing the former holder.
   * A copy this worker still holds stays when it is at least as new as the manifest (a false alarm: this
   * worker was the slow holder) and is replaced from disk when another holder wrote after it.
   */
  async recover(contextId: string, tenant: string, minVersion: number, claim?: { epoch: number; attempt: number }): Promise<void> {
    if (this.tiers.has(contextId)) {
      const onDisk = await this.cold.readManifest(contextId).catch(() => undefined);
      if (claim) await this.fences?.claim(contextId, claim.epoch, claim.attempt);
      if (!onDisk || onDisk.version <= this.tiers.durableVersion(contextId)) return;
      this.letGo(contextId);
      await this.tiers.dropLocalCopy(contextId);
    }
    const expected = { expectedTenant: await this.tenantIds.idOf(tenant), minVersion };
    // Refusals here involve no token (the caller's was admitted); they are audited like every other.
    const refusal = { contextId, agentId: contextId, tenant, workflowId: '', action: 'recover' as const, token: '' };
    // Checked before anything is adopted: the manifest's tenant is authenticated, the grant file is not;
    // its version against the newest the workflow saw written (an older one put back is a rollback).
    const found = await this.cold.readManifest(contextId, { expectedTenant: expected.expectedTenant }).catch(async (err: unknown) => {
      if (!isFabricError(err, 'PERMISSION_DENIED')) throw err;
      return this.capabilities.deny(refusal, 'foreign-manifest');
    });
    if (found.version < minVersion) {
      await this.capabilities.record(refusal, 'stale-manifest');
      throw new FabricError('INTEGRITY', `context ${contextId}: manifest version ${found.version} is older than the expected ${minVersion} (stale or replayed)`);
    }
    // The same checks again as it is read for adoption: a file swapped in between is refused there.
    await this.tiers.recover(contextId, expected);
    // Claimed once adopted (an import: no manifest written yet), so a failed adoption never fences a
    // former holder that may still have the only good copy.
    if (claim && this.fences) {
      try {
        await this.fences.claim(contextId, claim.epoch, claim.attempt);
      } catch (err) {
        await this.tiers.dropLocalCopy(contextId);
        throw err;
      }
    }
    this.tenants.set(contextId, tenant);
    this.observer?.transferred('recover', 0);
  }

  /**
   * Forks `parentId` (already admitted with `parent`'s claims) into the child the call names. The
   * child's token must be for the child, in the parent's tenant, with at most the parent's rights;
   * `childCustodian`, when given, must be that token's custodian (the child's workflow carries it).
   */
  async share(parentId: string, parent: CapabilityClaims, child: Presented, checkpoint: boolean, childCustodian?: unknown): Promise<void> {
    const childId = child.contextId;
    const claims = await this.capabilities.childClaims(child, parent);
    if (childCustodian !== undefined) await this.capabilities.custodianOf({ ...child, token: childCustodian }, claims);
    const existing = await this.grants.get(childId);
    if (existing) {
      // Ours only if this very fork made it (a retry whose record was lost with its worker): a fork never
      // takes over a context that exists, whoever's it is.
      if (existing.tenant !== claims.ten || existing.agentId !== claims.sub || existing.fork !== claims.fork) await this.capabilities.deny(child, 'context-exists');
    } else if (this.tiers.has(childId)) {
      await this.capabilities.deny(child, 'context-exists'); // held here with no grant: not this fork's either
    } else {
      await this.grants.put({ contextId: childId, tenant: claims.ten, agentId: claims.sub, ...forkOf(claims) });
    }
    if (!this.tiers.has(childId)) await this.tiers.fork(parentId, childId);
    this.tenants.set(childId, claims.ten);
    if (checkpoint) await this.tiers.checkpoint(childId);
  }

  /**
   * Undoes share() for a child whose workflow never started: the child's token is checked as share
   * checked it, and only the child context that this very fork created (its grant names the fork) is
   * released: an undo never releases what its own operation did not create. Returns its tokens.
   */
  async unshare(parent: CapabilityClaims, child: Presented): Promise<number> {
    const claims = await this.capabilities.childClaims(child, parent);
    const grant = await this.grants.get(child.contextId);
    if (!grant || grant.tenant !== claims.ten || grant.agentId !== claims.sub || grant.fork !== claims.fork) return 0; // not ours to undo
    if (!this.tiers.has(child.contextId)) {
      await this.forget(child.contextId, claims);
      return 0;
    }
    return this.release(child.contextId, claims);
  }

  /**
   * Frees the context, then revokes every token of it up to the releasing one's epoch (the record
   * outlives the grant: a replayed token stays refused), then drops the grant.
   */
  async release(contextId: string, claims: CapabilityClaims): Promise<number> {
    const tokens = this.tiers.contextStats(contextId).tokens;
    await this.tiers.release(contextId);
    await this.forget(contextId, claims);
    return tokens;
  }

  /**
   * Ends a context wherever its bytes are: released when this worker holds it, else its durable copy (if
   * any is left) is deleted. Returns the tokens freed here (0 when it was not held).
   */
  async retire(contextId: string, claims: CapabilityClaims): Promise<number> {
    if (this.tiers.has(contextId)) return this.release(contextId, claims);
    await this.tiers.discard(contextId);
    await this.forget(contextId, claims);
    return 0;
  }

  /** The engine's hot copy follows the context off the device: the next turn reads the stored pages. */
  private letGo(contextId: string): void {
    void this.engine?.release(contextId).catch(() => undefined); // nothing to let go of is no failure
  }

  private async forget(contextId: string, claims: CapabilityClaims): Promise<void> {
    this.letGo(contextId);
    await this.capabilities.revoke(contextId, claims.epoch + 1);
    await this.grants.delete(contextId);
    this.tenants.delete(contextId);
  }

  /** Accepts `next` (and its custodian, if given) as the context's capability (see CapabilityCheck.renewal); touches no tier. */
  async renew(current: CapabilityClaims, next: Presented, nextCustodian?: unknown): Promise<void> {
    await this.capabilities.renewal(next, current, nextCustodian);
  }

  /** Totals over one tenant's contexts on this worker: nothing about any other tenant. */
  tenantStats(tenant: string): { contexts: number; tokens: number; blocks: number; sharedBlocks: number } {
    const totals = { contexts: 0, tokens: 0, blocks: 0, sharedBlocks: 0 };
    for (const [contextId, owner] of this.tenants) {
      if (owner !== tenant || !this.tiers.has(contextId)) continue;
      const stats = this.tiers.contextStats(contextId);
      totals.contexts++;
      totals.tokens += stats.tokens;
      totals.blocks += stats.blocks;
      totals.sharedBlocks += stats.sharedBlocks;
    }
    return totals;
  }

  // ---- turns ----

  /**
   * Runs a turn: a message through the worker's engine, or a synthetic turn's stand-in KV. Appends the
   * turn's KV unless the context already ends with it (an attempt on a lost worker applied it before its
   * durable copy was written), and returns the digest after the turn.
   */
  async appendTurn(contextId: string, turn: number, input: TurnInput, before: DigestState): Promise<AppliedTurn> {
    return 'tokens' in input ? this.appendSynthetic(contextId, turn, input.tokens, before) : this.appendModelTurn(contextId, input, before);
  }

  private async appendSynthetic(contextId: string, turn: number, tokens: number, before: DigestState): Promise<AppliedTurn> {
    if (this.engine) throw new FabricError('INVALID_ARGUMENT', `this worker runs ${this.engine.fingerprint.engine}: a turn takes a message, not a token count`);
    const kv = syntheticKv(contextId, turn, tokens, this.layout.bytesPerToken);
    const held = this.tiers.contextStats(contextId).tokens;
    let alreadyApplied = false;
    if (held === before.tokens) {
      await this.tiers.append(contextId, kv);
      this.observer?.transferred('append', kv.byteLength);
    } else if (held === before.tokens + tokens) {
      alreadyApplied = true;
    } else {
      throw new FabricError('INTEGRITY', `context ${contextId} holds ${held} tokens; the workflow expected ${before.tokens}`);
    }
    const digest = await this.digestAfter(contextId, before, tokens, turn);
    const appended = alreadyApplied ? await this.tiers.read(contextId, before.tokens, tokens) : undefined;
    if (appended && !Buffer.from(appended.buffer, appended.byteOffset, appended.byteLength).equals(kv)) {
      throw new FabricError('INTEGRITY', `context ${contextId} ends with bytes that are not turn ${turn}`);
    }
    return { digest, alreadyApplied };
  }

  /**
   * The engine reads the stored context only when it does not hold it hot; what the turn added goes in
   * with the context's new note (token ids, the reply) under one lock, so they are never out of step.
   */
  private async appendModelTurn(contextId: string, input: { message: string; generation?: TurnGeneration }, before: DigestState): Promise<AppliedTurn> {
    const engine = this.engine;
    if (!engine) throw new FabricError('INVALID_ARGUMENT', 'this worker runs no model (synthetic engine): a turn takes a token count');
    const held = this.tiers.contextStats(contextId).tokens;
    const note = engineNoteOf(contextId, this.tiers.attachment(contextId), held);
    if (held > before.tokens && note?.lastTurn?.at === before.tokens) {
      // Applied by an attempt whose worker was lost: the reply it gave comes from the note.
      const digest = await this.digestAfter(contextId, before, held - before.tokens, 'its last');
      return { digest, alreadyApplied: true, reply: note.lastTurn.reply };
    }
    if (held !== before.tokens) throw new FabricError('INTEGRITY', `context ${contextId} holds ${held} tokens; the workflow expected ${before.tokens}`);
    const result = await engine.turn({
      key: contextId,
      context: {
        tokens: Uint32Array.from(note?.tokens ?? []),
        ...(note ? { fingerprint: note.fingerprint } : {}),
        loadKv: () => this.tiers.read(contextId, 0, held),
      },
      input: input.message,
      ...(input.generation ? { generation: input.generation } : {}),
    });
    const reply: TurnReply = { reply: result.reply, promptTokens: result.promptTokens, replyTokens: result.replyTokens };
    const next: EngineNote = { fingerprint: engine.fingerprint, tokens: [...(note?.tokens ?? []), ...result.appended.tokens], lastTurn: { at: held, reply } };
    try {
      await this.tiers.append(contextId, result.appended.kv, next as unknown as ContextAttachment);
    } catch (err) {
      await engine.release(contextId); // its hot copy is ahead of the stored context now
      throw err;
    }
    this.observer?.transferred('append', result.appended.kv.byteLength);
    const digest = await this.digestAfter(contextId, before, result.appended.tokens.length, 'this');
    return { digest, alreadyApplied: false, reply };
  }

  /**
   * The digest after `added` tokens past `before`; INTEGRITY if the context no longer starts as the
   * workflow recorded before the turn.
   */
  private async digestAfter(contextId: string, before: DigestState, added: number, turn: number | string): Promise<DigestState> {
    if (!(await this.matches(contextId, before))) {
      throw new FabricError('INTEGRITY', `context ${contextId} no longer matches its digest before ${typeof turn === 'number' ? `turn ${turn}` : `${turn} turn`}`);
    }
    return this.digestAt(contextId, before.tokens + added);
  }

  /**
   * The digest of the context's first `tokens` tokens, from the page checksums; a prefix that ends inside
   * a page re-reads that page's first tokens (at most one page).
   */
  private async digestAt(contextId: string, tokens: number): Promise<DigestState> {
    const { tokensPerBlock } = this.layout;
    const sums = Array.from(this.tiers.pageChecksums(contextId).subarray(0, Math.ceil(tokens / tokensPerBlock)));
    const inPage = tokens % tokensPerBlock;
    // The last page holds more than the prefix's share of it: sum just that share.
    if (inPage !== 0 && this.tiers.contextStats(contextId).tokens > tokens) {
      sums[sums.length - 1] = crc32c(await this.tiers.read(contextId, tokens - inPage, inPage));
    }
    return pageDigest(sums, tokens, tokensPerBlock);
  }

  /** Whether the context's first `recorded.tokens` tokens are the ones the digest was taken of. */
  private async matches(contextId: string, recorded: DigestState): Promise<boolean> {
    if (this.tiers.contextStats(contextId).tokens < recorded.tokens) return false;
    if (isChainDigest(recorded)) return (await this.verifyChain(contextId, recorded)).value === recorded.value;
    return (await this.digestAt(contextId, recorded.tokens)).value === recorded.value;
  }

  // ---- tiers ----

  /** Moves the context off the device; returns the bytes that changed tier. */
  async offload(contextId: string, tier: 'host' | 'disk'): Promise<number> {
    this.letGo(contextId);
    const { bytes } = await this.tiers.offload(contextId, tier);
    this.observer?.transferred(tier === 'host' ? 'to-host' : 'to-disk', bytes);
    return bytes;
  }

  /** Brings the context to the device; returns the bytes moved and the tier it came from. */
  async restore(contextId: string): Promise<{ bytes: number; from: Tier }> {
    const { bytes, from } = await this.tiers.restore(contextId);
    this.observer?.transferred('to-device', bytes);
    return { bytes, from };
  }

  async checkpoint(contextId: string): Promise<void> {
    await this.tiers.checkpoint(contextId);
  }

  /**
   * A turn's durable copy. A full disk does not stop the agent: the turn is in memory, the older copy
   * stays, and false tells the workflow its durable copy lags until a later one succeeds.
   */
  async checkpointUnlessDiskFull(contextId: string): Promise<boolean> {
    try {
      await this.tiers.checkpoint(contextId);
      return true;
    } catch (err) {
      if (!isFabricError(err, 'STORAGE_FULL')) throw err;
      this.observer?.checkpointSkipped();
      return false;
    }
  }

  /**
   * Checks the context against the digest its workflow recorded: its first `expected.tokens` tokens must
   * have that digest (INTEGRITY otherwise). Returns the digest of the whole context. The bytes were checked
   * against their page checksums by the moves that brought them back; this compares the checksums, in
   * order, with the record, re-reading at most one page. A legacy chain digest is checked the old way,
   * over every byte, once.
   */
  async verify(contextId: string, expected: DigestState): Promise<DigestState> {
    const total = this.tiers.contextStats(contextId).tokens;
    if (total < expected.tokens) {
      throw new FabricError('INTEGRITY', `context ${contextId} came back with ${total} tokens; the workflow recorded ${expected.tokens}`);
    }
    if (!(await this.matches(contextId, expected))) {
      throw new FabricError('INTEGRITY', `context ${contextId}: the restored pages do not match the digest its workflow recorded`);
    }
    return this.digestAt(contextId, total);
  }

  /** The legacy chain digest of the context's first `recorded.tokens` tokens, read slice by slice. */
  private async verifyChain(contextId: string, recorded: ChainDigestState): Promise<ChainDigestState> {
    const { bytesPerToken } = this.layout;
    const slice = Math.max(1, Math.floor(VERIFY_SLICE_BYTES / bytesPerToken));
    const digest = ChainDigest.fresh(bytesPerToken);
    const readSlice = (start: number): Promise<Uint8Array> | undefined =>
      start < recorded.tokens ? this.tiers.read(contextId, start, Math.min(slice, recorded.tokens - start)) : undefined;
    this.verifying.set(contextId, 0);
    let next: Promise<Uint8Array> | undefined;
    try {
      // The next slice is read (on the thread pool) while this one is hashed.
      next = readSlice(0);
      for (let at = 0; next; ) {
        const bytes = await next;
        at += bytes.byteLength / bytesPerToken;
        next = readSlice(at);
        digest.update(bytes);
        this.verifying.set(contextId, at);
      }
      return digest.finish();
    } finally {
      next?.catch(() => undefined);
      this.verifying.delete(contextId);
    }
  }

  verifiedTokens(contextId: string): number {
    return this.verifying.get(contextId) ?? 0;
  }

  pin(contextId: string): void {
    this.tiers.pin(contextId);
  }

  unpin(contextId: string): void {
    this.tiers.unpin(contextId);
  }

  snapshot(contextId: string): ContextSnapshot {
    const stats = this.tiers.contextStats(contextId);
    return {
      tier: this.tiers.residency(contextId),
      tokens: stats.tokens,
      blocks: stats.blocks,
      sharedBlocks: stats.sharedBlocks,
      pinned: stats.pinCount > 0,
      durableVersion: this.tiers.durableVersion(contextId),
    };
  }

  /** Drops the copies of contexts another worker has adopted since (this one was a slow holder). */
  async dropFencedContexts(): Promise<string[]> {
    const dropped: string[] = [];
    for (const contextId of this.tiers.contextIds()) {
      if (!this.fences || (await this.fences.stillHolder(contextId))) continue;
      this.letGo(contextId);
      await this.tiers.dropLocalCopy(contextId).catch(() => undefined); // gone meanwhile: nothing to drop
      this.tenants.delete(contextId);
      dropped.push(contextId);
    }
    return dropped;
  }
}

/** The grant's record of the fork that creates a context, when a fork's token creates it. */
function forkOf(claims: CapabilityClaims): { fork?: string } {
  return claims.fork === undefined ? {} : { fork: claims.fork };
}
