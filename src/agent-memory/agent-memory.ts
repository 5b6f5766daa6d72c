// One worker's agent contexts: the tiered memory, the grants that say who may touch each context, the
// engine that runs message turns, and the byte-level checks a workflow cannot do itself. One public
// method per operation (src/operations): each admits its call (the token against the context's grant),
// applies it and returns its whole result. The rest is what the worker itself needs (the drain at
// shutdown, housekeeping, a local resume's look at where a context is). It knows nothing of Temporal:
// the activities adapt it, the plugin and tests use it directly.
import type { Engine } from '../engines/engine';
import { FabricError, isFabricError } from '../fabric/errors';
import { bytesPerTokenOf } from '../fabric/layout';
import type { Tier } from '../fabric/tier';
import type { BlockLayout, ModelShape, TenantBlocks, TenantId } from '../fabric/types';
import { OPERATIONS, type OperationRow } from '../operations/operations';
import type { CapabilityClaims } from '../security/claims';
import type { GrantStore } from '../shared-directory/grant-store';
import type { HolderFences } from '../shared-directory/holder-fences';
import type { TenantRegistry } from '../shared-directory/tenant-registry';
import type { ColdStore } from '../tiers/cold';
import { PrefixSharing } from '../prefix-sharing/prefix-sharing';
import type { TenantSalts } from '../prefix-sharing/prefix-keys';
import type { QuotaName } from '../tiers/tenant-quotas';
import type { MoveReport, TieredMemory, TieredStats } from '../tiers/tiered-memory';
import type { CapabilityCheck, Presented } from './capability-check';
import { emptyDigest, type DigestState } from './context-digest';
import type { ContextSnapshot } from './context-snapshot';
import { ContextVerifier } from './context-verifier';
import { Custodians, type Custody } from './custodians';
import type { Allocated, ForkResult, ReleaseResult, RenewResult, ResumeResult, SuspendResult, TurnResult } from './operation-results';
import { turnInputOf, type TurnFields } from './turn';
import { TurnRunner } from './turn-runner';

export type TransferDirection = 'append' | 'to-host' | 'to-disk' | 'to-device' | 'recover';

/**
 * What a prefetch did: found the context resident, resumed it, or, without free device room, brought it
 * from disk to host memory (filled-host), or left it where it was, on host or on disk.
 */
export type PrefetchOutcome = 'resident' | 'resumed' | 'filled-host' | 'stopped-host' | 'stopped-disk';

/** What the worker's metrics see; every method is optional work for the caller's bookkeeping only. */
export interface MemoryObserver {
  transferred(direction: TransferDirection, bytes: number): void;
  denied(action: string): void;
  evicted(from: Tier, to: Tier): void;
  /** A turn's checkpoint found the disk full (the turn stays in memory only). */
  checkpointSkipped(): void;
  /** A call refused RESOURCE_EXHAUSTED: `tenant` (a checked name, or its id in hex) is at its `quota`. */
  quotaRefused(tenant: string, quota: QuotaName): void;
  /** A planned wake-up's prefetch (resume with roomOnly), by what it found. */
  prefetched?(outcome: PrefetchOutcome): void;
  /** A first model turn that could share a prefix: tokens it took from its tenant's holders, tokens the model evaluated. */
  firstTurnPrefill?(contextId: string, figures: { sharedTokens: number; evaluatedTokens: number }): void;
}

/** One tenant's blocks in memory on this worker, the tenant named (tenantBlocks()). */
export interface NamedTenantBlocks extends Omit<TenantBlocks, 'tenant'> {
  tenant: string;
}

/**
 * Runs an operation's work once its call is admitted. The activities pass their journal's at-most-once
 * run (operation-journal.ts), so nothing is recorded for a refused call; direct callers run it as is.
 */
export type RunAdmitted = <T>(work: () => Promise<T>) => Promise<T>;

const runNow: RunAdmitted = (work) => work();

/**
 * How long a resume from host leaves its pages' copy to the device waiting, so that the copy does not
 * compete for the CPU with the resume's answer on its way back through Temporal (tens of ms); a call on the
 * context meanwhile starts it at once.
 */
const RESUME_COPY_PAUSE_MS = 200;

export class AgentMemory {
  private readonly tiers: TieredMemory;
  private readonly layout: BlockLayout;
  private readonly grants: GrantStore;
  private readonly capabilities: CapabilityCheck;
  /** Tenant of every context this worker holds: statistics go to one tenant at a time. */
  private readonly tenants = new Map<string, string>();
  /** The checked names of the tenant ids this worker has looked up: what metrics label tenants with. */
  private readonly tenantNames = new Map<TenantId, string>();
  private readonly cold: Pick<ColdStore, 'readManifest' | 'hasManifest' | 'listManifests'>;
  private readonly observer: MemoryObserver | undefined;
  private readonly fences: HolderFences | undefined;
  private readonly tenantIds: TenantRegistry;
  /** Runs turns (src/engines/registry.ts); its declared needs say how a resume reaches it. */
  private readonly engine: Engine;
  /** The name of the model the pool is made for: an agent of another is refused naming it. */
  private readonly modelName: string | undefined;
  private readonly verifier: ContextVerifier;
  private readonly turns: TurnRunner;
  private readonly custodians = new Custodians();
  /** Prefix sharing within a tenant; undefined on a worker without it. */
  private readonly prefixes: PrefixSharing | undefined;

  constructor(options: {
    tiers: TieredMemory;
    layout: BlockLayout;
    /** The catalog name of the layout's model (models.ts), for refusals; else the refusal names its sizes only. */
    modelName?: string;
    grants: GrantStore;
    /** Verifies presented tokens (public keys only), epochs and the audit log of denials. */
    capabilities: CapabilityCheck;
    /**
     * The tier layer's cold store: recover checks a manifest's tenant with it before adopting anything,
     * and shared prefixes are found there.
     */
    cold: Pick<ColdStore, 'readManifest' | 'hasManifest' | 'listManifests'>;
    observer?: MemoryObserver;
    /** Claims adopted contexts so a slow former holder cannot overwrite them (holder-fences.ts). */
    fences?: HolderFences;
    /** Tenant names to the allocator's ids, unique across the workers sharing the tier directory. */
    tenantIds: TenantRegistry;
    /** Runs turns; its hot copy of a context is dropped when the context is suspended, dropped or freed. */
    engine: Engine;
    /**
     * A model turn's write-behind that failed (the pages stay behind the conversation, which the
     * workflow's tail rebuilds on the next call): for the worker's log.
     */
    onBackgroundError?: (what: string, err: unknown) => void;
    /** The worker's tenant salts (prefix-keys.ts): agents of one tenant then share prompt prefixes here. Absent: no sharing. */
    prefixSalts?: TenantSalts;
    /** How long a shared prefix nothing refers to stays (PrefixSharingOptions.idleMs; default DEFAULT_PREFIX_IDLE_MS). */
    prefixIdleMs?: number;
    /** Whether shared prefixes go through the cold tier to other workers and restarts (cold-prefixes.ts); default true. */
    prefixesInColdTier?: boolean;
  }) {
    this.tiers = options.tiers;
    this.layout = options.layout;
    this.modelName = options.modelName;
    this.grants = options.grants;
    this.capabilities = options.capabilities;
    this.cold = options.cold;
    this.observer = options.observer;
    this.fences = options.fences;
    this.tenantIds = options.tenantIds;
    this.engine = options.engine;
    this.verifier = new ContextVerifier(this.tiers, this.layout.tokensPerBlock);
    // An engine of stand-in KV (the synthetic one) makes rows per context, not per token: nothing to share.
    const { prefixSalts } = options;
    this.prefixes =
      prefixSalts && !this.engine.standInKv
        ? new PrefixSharing({
            salts: prefixSalts,
            tokensPerBlock: this.layout.tokensPerBlock,
            tiers: this.tiers,
            engine: this.engine,
            ...(options.prefixesInColdTier === false ? {} : { cold: this.cold }),
            ...(options.prefixIdleMs === undefined ? {} : { idleMs: options.prefixIdleMs }),
            onBackgroundError: (what, err) => options.onBackgroundError?.(what, err),
          })
        : undefined;
    this.turns = new TurnRunner({
      tiers: this.tiers,
      verifier: this.verifier,
      bytesPerToken: this.layout.bytesPerToken,
      engine: this.engine,
      appended: (bytes) => this.observer?.transferred('append', bytes),
      checkpointSkipped: () => this.observer?.checkpointSkipped(),
      onWriteBehindError: (contextId, err) => options.onBackgroundError?.(`saving a turn of ${contextId} into its pages`, err),
      ...(this.prefixes ? { prefixes: { sharing: this.prefixes, tenantOf: (contextId: string) => this.tenants.get(contextId) } } : {}),
      firstTurnPrefill: (contextId, figures) => this.observer?.firstTurnPrefill?.(contextId, figures),
    });
    // Told by the tier layer itself, foreground or background: nothing to rescan after a call. The
    // engine's hot copy stays: it is the engine's memory, not the pool's, and may hold a turn whose KV
    // the pages do not have yet.
    this.tiers.onEviction((eviction) => this.observer?.evicted(eviction.from, eviction.to));
    this.tiers.onQuotaRefusal((refusal) => this.observer?.quotaRefused(this.tenantName(refusal.tenant), refusal.quota));
  }

  // ---- operations, one method each (src/operations) ----

  /**
   * Creates the context and its grant for an agent whose model fits this worker's pool. `created` is
   * false when an earlier attempt created it here already. A context of that id granted to another
   * agent or tenant is denied. Admission is part of the creation (the grant is made here), so the
   * activities run this whole call inside their journal.
   */
  async allocate(call: Presented, request: { shape: ModelShape; tokensPerBlock: number; checkpoint: boolean }): Promise<Allocated> {
    this.checkShape(request.shape, request.tokensPerBlock);
    const { contextId } = call;
    const claims = await this.capabilities.claimsFor(call);
    const existing = await this.grants.get(contextId);
    if (existing) await this.capabilities.agree(call, existing, claims);
    this.custodians.admitted(contextId, call.token, claims);
    // Every token minted before this one (an earlier context of this id that was never released, or whose
    // release's epoch entry was deleted) is refused from now on. Idempotent for a retry.
    await this.capabilities.revoke(contextId, claims.epoch);
    const created = !this.tiers.has(contextId); // else an earlier attempt created it here
    if (created) {
      if (!existing) await this.grants.put({ contextId, tenant: claims.ten, agentId: claims.sub, ...forkOf(claims) });
      this.tiers.create(contextId, await this.tenantIdOf(claims.ten));
      this.tenants.set(contextId, claims.ten);
      if (request.checkpoint) await this.tiers.spill(contextId);
    }
    return { ...this.snapshot(contextId), digest: emptyDigest(), created, revokedBelow: claims.epoch };
  }

  /**
   * Adopts the context from its manifest in the cold tier and claims it for failover `epoch` (its
   * activity attempt `attempt`), fencing the former holder. The manifest must be the caller's tenant's
   * and at least `minVersion` (the newest its workflow saw written): an older one put back is INTEGRITY.
   * A copy this worker still holds stays when it is at least as new as the manifest (a false alarm: this
   * worker was the slow holder) and is replaced from disk when another holder wrote after it.
   */
  async recover(
    call: Presented,
    request: { minVersion: number; epoch: number; attempt: number },
    run: RunAdmitted = runNow,
  ): Promise<ContextSnapshot> {
    await this.admit(call);
    return run(async () => {
      await this.adopt(call.contextId, call.tenant, request.minVersion, { epoch: request.epoch, attempt: request.attempt });
      return this.snapshot(call.contextId);
    });
  }

  /**
   * Ends a context wherever its bytes are: released when this worker holds it, else its durable copy (if
   * any is left) is deleted; its tokens are revoked and its grant dropped either way.
   */
  async retire(call: Presented, run: RunAdmitted = runNow): Promise<ReleaseResult> {
    const claims = await this.admit(call);
    return run(async () => {
      if (this.tiers.has(call.contextId)) return { releasedTokens: await this.free(call.contextId, claims) };
      await this.tiers.discard(call.contextId);
      await this.forget(call.contextId, claims);
      return { releasedTokens: 0 };
    });
  }

  /**
   * Runs a turn (turn-runner.ts) and, when asked, writes the durable copy after it: a synthetic turn at
   * once, a model turn after its write-behind. A full disk does not stop the agent: the turn is in memory,
   * the older copy stays, and `durable: false` says so (for a model turn, of the last write-behind's).
   */
  async turn(call: Presented, ask: TurnFields, run: RunAdmitted = runNow): Promise<TurnResult> {
    await this.admitHeld(call);
    return run(async () => {
      const contextId = call.contextId;
      const input = turnInputOf(ask);
      const { digest, alreadyApplied, reply, added } = await this.turns.run(
        contextId,
        ask.turn,
        input,
        ask.before,
        ask.tail ?? [],
        ask.checkpoint,
        ask.sharing,
      );
      let durable: boolean | undefined;
      if (ask.checkpoint) durable = 'tokens' in input ? await this.spillUnlessDiskFull(contextId) : !this.turns.durableCopyStale(contextId);
      return {
        ...this.snapshot(contextId),
        digest,
        alreadyApplied,
        ...(reply ? { reply } : {}),
        ...(added ? { added } : {}),
        ...(durable === undefined ? {} : { durable }),
      };
    });
  }

  /**
   * Brings the context to the device and checks it against the digest its workflow recorded: its first
   * `expected.tokens` tokens must have that digest (INTEGRITY otherwise); it may be longer only by a turn
   * in flight, or by the recorded `tail`. A model context is then loaded into the engine (its tail
   * evaluated), so the next turn pays only its own model time. Returns what moved, from where, and the
   * digest of the whole of its pages. `roomOnly` (a planned wake-up's prefetch) evicts nothing to make
   * room: the context goes as far up as free room takes it (prefetch).
   */
  async resume(
    call: Presented,
    { expected, tail = [], roomOnly = false }: { expected: DigestState; tail?: readonly number[]; roomOnly?: boolean },
    run: RunAdmitted = runNow,
  ): Promise<ResumeResult> {
    await this.admitHeld(call);
    return run(async () => {
      const contextId = call.contextId;
      await this.turns.settled(contextId);
      if (roomOnly) return this.prefetch(contextId, expected, tail);
      if (this.engine.needs.hostPool && this.tiers.residency(contextId) === 'host') {
        return this.resumeFromHost(contextId, expected, tail);
      }
      const [moved, transferMs] = await timed(() => this.tiers.promote(contextId));
      this.observer?.transferred('to-device', moved.bytes);
      return this.checkAndLoad(contextId, expected, tail, moved, transferMs);
    });
  }

  /**
   * A prefetch: the context as far up as free room takes it (TieredMemory.promoteIntoFreeRoom), counted by
   * outcome. On the device, it is checked and loaded as by any resume; short of it (on host, pages filled
   * from disk, or where it was) nothing is checked yet, and the answer carries the recorded digest: the
   * call that needs the context resumes it from there.
   */
  private async prefetch(contextId: string, expected: DigestState, tail: readonly number[]): Promise<ResumeResult> {
    const [moved, transferMs] = await timed(() => this.tiers.promoteIntoFreeRoom(contextId));
    this.observer?.prefetched?.(prefetchOutcome(moved));
    if (moved.bytes > 0) this.observer?.transferred(moved.to === 'device' ? 'to-device' : 'to-host', moved.bytes);
    if (moved.to === 'device') return this.checkAndLoad(contextId, expected, tail, moved, transferMs);
    return {
      ...this.snapshot(contextId),
      bytes: moved.bytes,
      transferMs,
      from: moved.from,
      digest: expected,
      verifyMs: 0,
      engineLoadMs: 0,
    };
  }

  /** A context just brought to the device: its pages checked against the record, then loaded into the engine. */
  private async checkAndLoad(
    contextId: string,
    expected: DigestState,
    tail: readonly number[],
    { bytes, from }: MoveReport,
    transferMs: number,
  ): Promise<ResumeResult> {
    const [digest, verifyMs] = await timed(() => this.verifier.verify(contextId, expected));
    const [, engineLoadMs] = await timed(() => this.turns.load(contextId, expected, tail));
    return { ...this.snapshot(contextId), bytes, transferMs, from, digest, verifyMs, engineLoadMs };
  }

  /**
   * A resume from host memory on a worker whose engine's own cache is the hot tier (needs.hostPool): the
   * engine loads from the host pages, and the resume answers once it has, so the next turn is hot. The
   * pages follow to the device write-behind, after a pause (RESUME_COPY_PAUSE_MS; the next call on the
   * context starts the copy and waits for it; a turn's append would promote them first anyway). Copied
   * while llama.cpp read the laid-out file, they competed with it for memory bandwidth; copied at once
   * after, with the answer on its way back (docs/engines.md). The pages are checked against the record
   * first (their checksums; each page again as it is laid out). The result reports the context resident,
   * where the copy leaves it; a copy that fails is reported as any write-behind is, and the pages stay on
   * the host, whole.
   */
  private async resumeFromHost(contextId: string, expected: DigestState, tail: readonly number[]): Promise<ResumeResult> {
    const [digest, verifyMs] = await timed(() => this.verifier.verify(contextId, expected));
    const [, engineLoadMs] = await timed(() => this.turns.load(contextId, expected, tail));
    // Pages found on the device by now were evicted to disk meanwhile and promoted for the layout.
    const from: Tier = this.tiers.residency(contextId) === 'device' ? 'disk' : 'host';
    const handle = this.tiers.handle(contextId);
    this.turns.writeBehindAfterPause(contextId, RESUME_COPY_PAUSE_MS, async () => {
      // Only to the incarnation the resume loaded: one freed meanwhile, perhaps made again for someone else, is left alone.
      if (!this.tiers.has(contextId) || this.tiers.handle(contextId) !== handle) return;
      const { bytes } = await this.tiers.promote(contextId);
      this.observer?.transferred('to-device', bytes);
    });
    return { ...this.snapshot(contextId), tier: 'device', bytes: 0, transferMs: 0, from, digest, verifyMs, engineLoadMs };
  }

  /**
   * Demotes the context off the device, to host memory or to disk (with its manifest), its pages first
   * brought up to the whole conversation the workflow recorded (`expected` and `tail`): the context leaves
   * the engine. Returns the digest of all of it.
   */
  async suspend(
    call: Presented,
    request: { tier: 'host' | 'disk'; expected?: DigestState; tail?: readonly number[] },
    run: RunAdmitted = runNow,
  ): Promise<SuspendResult> {
    await this.admitHeld(call);
    return run(async () => {
      const { contextId } = call;
      const [bytes, transferMs] = await timed(async () => {
        await this.turns.saveTail(contextId, request);
        return this.demote(contextId, request.tier);
      });
      const digest = await this.verifier.digestAt(contextId, this.tiers.contextStats(contextId).tokens);
      return { ...this.snapshot(contextId), digest, bytes, transferMs };
    });
  }

  /**
   * Forks the call's context into the child `child` names, sharing its blocks copy-on-write. The child's
   * token must be for the child, in the parent's tenant, with at most the parent's rights, and
   * `childCustodian` that token's custodian (the child's workflow carries it).
   */
  async fork(
    call: Presented,
    child: Presented,
    options: { childCustodian: unknown; checkpoint: boolean; expected?: DigestState; tail?: readonly number[] },
    run: RunAdmitted = runNow,
  ): Promise<ForkResult> {
    const parent = await this.admitHeld(call);
    return run(async () => {
      const childId = child.contextId;
      const claims = await this.capabilities.childClaims(child, parent);
      const custodian = await this.capabilities.custodianOf({ ...child, token: options.childCustodian }, claims);
      const existing = await this.grants.get(childId);
      if (existing) {
        // Ours only if this very fork made it (a retry whose record was lost with its worker): a fork never
        // takes over a context that exists, whoever's it is.
        if (!madeBy(existing, claims)) await this.capabilities.deny(child, 'context-exists');
      } else if (this.tiers.has(childId)) {
        await this.capabilities.deny(child, 'context-exists'); // held here with no grant: not this fork's either
      } else {
        await this.grants.put({ contextId: childId, tenant: claims.ten, agentId: claims.sub, ...forkOf(claims) });
      }
      // As allocate does, once the id is this fork's: tokens minted before the child's never open it.
      await this.capabilities.revoke(childId, claims.epoch);
      // The child gets the pages (once the child's token passed): every turn of the parent's must be in them.
      await this.turns.saveTail(call.contextId, options);
      if (!this.tiers.has(childId)) await this.tiers.fork(call.contextId, childId);
      this.tenants.set(childId, claims.ten);
      this.custodians.admitted(childId, options.childCustodian, custodian);
      if (options.checkpoint) await this.tiers.spill(childId);
      const digest = await this.verifier.digestAt(call.contextId, this.tiers.contextStats(call.contextId).tokens);
      return { digest, parent: this.snapshot(call.contextId), child: this.snapshot(childId), childRevokedBelow: claims.epoch };
    });
  }

  /**
   * Undoes fork() for a child whose workflow never started, with the parent's call (the child's token is
   * bound to a workflow that does not exist): the child's token is checked as fork checked it, and only
   * the child context that this very fork created (its grant names the fork) is freed, with its grant
   * and tokens: an undo never releases what its own operation did not create. Returns the parent's snapshot.
   */
  async unfork(call: Presented, child: Presented, run: RunAdmitted = runNow): Promise<ContextSnapshot> {
    const parent = await this.admitHeld(call);
    return run(async () => {
      const claims = await this.capabilities.childClaims(child, parent);
      const grant = await this.grants.get(child.contextId);
      if (grant && madeBy(grant, claims)) {
        if (this.tiers.has(child.contextId)) await this.free(child.contextId, claims);
        else await this.forget(child.contextId, claims);
      }
      return this.snapshot(call.contextId);
    });
  }

  /**
   * Keeps the context on its tier until unpinned (counted: each pin needs its unpin). RESOURCE_EXHAUSTED
   * when its tenant would pin more than its share of the device (TieredMemory.pin).
   */
  async pin(call: Presented, run: RunAdmitted = runNow): Promise<ContextSnapshot> {
    await this.admitHeld(call);
    return run(async () => {
      this.tiers.pin(call.contextId);
      return this.snapshot(call.contextId);
    });
  }

  async unpin(call: Presented, run: RunAdmitted = runNow): Promise<ContextSnapshot> {
    await this.admitHeld(call);
    return run(async () => {
      this.tiers.unpin(call.contextId);
      return this.snapshot(call.contextId);
    });
  }

  /**
   * Frees the context, then revokes every token of it up to the releasing one's epoch (the record
   * outlives the grant: a replayed token stays refused), then drops the grant.
   */
  async release(call: Presented, run: RunAdmitted = runNow): Promise<ReleaseResult> {
    const claims = await this.admitHeld(call);
    return run(async () => ({ releasedTokens: await this.free(call.contextId, claims) }));
  }

  /**
   * Accepts `next.token` as the context's capability, `next.custodian` as its custodian token (see
   * CapabilityCheck.renewal), and revokes every older token; touches no tier.
   */
  async renew(call: Presented, next: { token: unknown; custodian: unknown }, run: RunAdmitted = runNow): Promise<RenewResult> {
    const current = await this.admit(call);
    return run(async () => {
      const renewed = await this.capabilities.renewal({ ...call, token: next.token }, current, next.custodian);
      // Checked by renewal: the replacement's custodian, for this very workflow.
      this.custodians.named(call.contextId, next.custodian as string, call.workflowId);
      return { revokedBelow: renewed.epoch };
    });
  }

  /**
   * The admission every operation starts with, on its own (nothing is applied): the claims of a token
   * that allows the call, whose context's grant agrees with it. PERMISSION_DENIED for any refused token
   * (before the grant is even read), STALE_HANDLE for a context nobody granted.
   */
  async admit(call: Presented): Promise<CapabilityClaims> {
    const claims = await this.capabilities.claimsFor(call);
    const grant = await this.grants.get(call.contextId);
    if (!grant) throw new FabricError('STALE_HANDLE', `no context ${call.contextId}`);
    await this.capabilities.agree(call, grant, claims);
    this.custodians.admitted(call.contextId, call.token, claims);
    return claims;
  }

  /**
   * Admits a retry of an operation the activities' journal recorded under this very token and run: as
   * the first call was, except that an operation whose success revoked its own token (release, retire,
   * renew) is checked without the epoch it raised (CapabilityCheck.retryClaimsFor).
   */
  async admitRetry(call: Presented): Promise<void> {
    const row: OperationRow = OPERATIONS[call.action];
    if (row.revokesPresenter) await this.capabilities.retryClaimsFor(call);
    else await this.admit(call);
  }

  // ---- what the worker itself asks ----

  holds(contextId: string): boolean {
    return this.tiers.has(contextId);
  }

  /** Where the context is and how big; STALE_HANDLE when this worker does not hold it. */
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

  /** Blocks each tenant holds in device and host memory and pinned, for the worker's metrics. */
  tenantBlocks(): NamedTenantBlocks[] {
    return this.tiers.tenantBlocks().map((blocks) => ({ ...blocks, tenant: this.tenantName(blocks.tenant) }));
  }

  /** The worker's totals over every tier (operators and tests; no context or tenant named). */
  stats(): TieredStats {
    return this.tiers.stats();
  }

  /** The worker's prefix sharing, for its AI SDK calls to share the same index (model-call-memory.ts); undefined without it. */
  get prefixSharing(): PrefixSharing | undefined {
    return this.prefixes;
  }

  /** Every context this worker holds in memory or on its tiers. */
  heldContextIds(): string[] {
    return this.tiers.contextIds().filter((contextId) => !this.prefixes?.isHolder(contextId));
  }

  /** The context's workflow and the custodian token it last showed this worker: what a leaving worker proves itself with. */
  custodyOf(contextId: string): Custody | undefined {
    return this.custodians.of(contextId);
  }

  /**
   * The drain at shutdown: demotes the context to the cold tier with its manifest and drops the engine's
   * copy, with no caller to admit (the worker is stopping). Returns the bytes written.
   */
  async drainContext(contextId: string): Promise<number> {
    await this.turns.settled(contextId);
    return this.demote(contextId, 'disk');
  }

  /**
   * Resolves once every model turn's write-behind has run, and the shared prefixes' cold-tier work
   * (before the worker closes its engine and pool).
   */
  async settled(): Promise<void> {
    await this.turns.allSettled();
    await this.prefixes?.settled();
  }

  /** Deletes segment files no manifest names that are older than `minAgeMs`; returns how many. */
  /** Deletes the cold prefixes of dead workers (PrefixSharing.sweepColdPrefixes); 0 without prefix sharing. */
  sweepColdPrefixes(): Promise<number> {
    return this.prefixes?.sweepColdPrefixes() ?? Promise.resolve(0);
  }

  sweepOrphanSegments(minAgeMs: number): Promise<number> {
    return this.tiers.sweepOrphanSegments(minAgeMs);
  }

  /** Drops the copies of contexts another worker has adopted since (this one was a slow holder). */
  async dropFencedContexts(): Promise<string[]> {
    const dropped: string[] = [];
    for (const contextId of this.heldContextIds()) {
      if (!this.fences || (await this.fences.stillHolder(contextId))) continue;
      await this.prefixes?.released(contextId);
      this.dropEngineCopy(contextId);
      await this.tiers.dropLocalCopy(contextId).catch(() => undefined); // gone meanwhile: nothing to drop
      this.tenants.delete(contextId);
      this.custodians.forget(contextId);
      dropped.push(contextId);
    }
    return dropped;
  }

  // ---- inside ----

  /** The tenant's allocator id (its name checked by the registry first), remembered for naming it in metrics. */
  private async tenantIdOf(tenant: string): Promise<TenantId> {
    const id = await this.tenantIds.idOf(tenant);
    this.tenantNames.set(id, tenant);
    return id;
  }

  /** A tenant's checked name; one this worker never looked up (the AI SDK's contexts) by its id in hex. */
  private tenantName(id: TenantId): string {
    return this.tenantNames.get(id) ?? `id:${id.toString(16).padStart(8, '0')}`;
  }

  /** admit(), then STALE_HANDLE when this worker does not hold the context (its workflow then fails over). */
  private async admitHeld(call: Presented): Promise<CapabilityClaims> {
    const claims = await this.admit(call);
    if (!this.tiers.has(call.contextId)) throw new FabricError('STALE_HANDLE', `context ${call.contextId} is not held by this worker`);
    return claims;
  }

  private checkShape(shape: ModelShape, tokensPerBlock: number): void {
    const bytesPerToken = bytesPerTokenOf(shape);
    if (bytesPerToken !== this.layout.bytesPerToken || tokensPerBlock !== this.layout.tokensPerBlock) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        `agent model needs ${bytesPerToken} bytes per token and ${tokensPerBlock} tokens per block; this worker ` +
          `${this.modelName === undefined ? "'s pool has" : `serves model ${this.modelName}:`}` +
          ` ${this.layout.bytesPerToken} bytes per token ` +
          `and ${this.layout.tokensPerBlock} tokens per block`,
      );
    }
  }

  /** recover()'s work once admitted (see there). */
  private async adopt(
    contextId: string,
    tenant: string,
    minVersion: number,
    claim: { epoch: number; attempt: number },
    again = true,
  ): Promise<void> {
    if (this.tiers.has(contextId)) {
      const onDisk = await this.cold.readManifest(contextId).catch(() => undefined);
      await this.fences?.claim(contextId, claim.epoch, claim.attempt);
      if (!onDisk || onDisk.version <= this.tiers.durableVersion(contextId)) return;
      this.dropEngineCopy(contextId);
      await this.tiers.dropLocalCopy(contextId);
    }
    const expected = { expectedTenant: await this.tenantIdOf(tenant), minVersion };
    // Refusals here involve no token (the caller's was admitted); they are audited like every other.
    const refusal = { contextId, agentId: contextId, tenant, workflowId: '', action: 'recover' as const, token: '' };
    // Checked before anything is adopted: the manifest's tenant (authenticated, like the grant, which may be
    // an older one put back); its version against the newest the workflow saw written (a rollback).
    const found = await this.cold.readManifest(contextId, { expectedTenant: expected.expectedTenant }).catch(async (err: unknown) => {
      if (!isFabricError(err, 'PERMISSION_DENIED')) throw err;
      return this.capabilities.deny(refusal, 'foreign-manifest');
    });
    if (found.version < minVersion) {
      await this.capabilities.record(refusal, 'stale-manifest');
      throw new FabricError(
        'INTEGRITY',
        `context ${contextId}: manifest version ${found.version} is older than the expected ${minVersion} (stale or replayed)`,
      );
    }
    // The same checks again as it is read for adoption: a file swapped in between is refused there.
    await this.tiers.recover(contextId, expected);
    // Claimed once adopted (an import: no manifest written yet), so a failed adoption never fences a
    // former holder that may still have the only good copy.
    if (this.fences) {
      try {
        await this.fences.claim(contextId, claim.epoch, claim.attempt);
      } catch (err) {
        await this.tiers.dropLocalCopy(contextId);
        throw err;
      }
      // The adopted version written again as the next: a former holder that passed its fence check just
      // before the claim cannot land its write now. One that landed first is adopted with it, once.
      try {
        await this.tiers.reseal(contextId);
      } catch (err) {
        if (!isFabricError(err, 'STALE_HANDLE') || this.tiers.has(contextId) || !again) throw err;
        return this.adopt(contextId, tenant, minVersion, claim, false);
      }
    }
    this.tenants.set(contextId, tenant);
    this.observer?.transferred('recover', 0);
  }

  /** Demotes the context off the device, the engine's copy dropped; returns the bytes that changed tier. */
  private async demote(contextId: string, tier: 'host' | 'disk'): Promise<number> {
    await this.turns.settled(contextId);
    this.dropEngineCopy(contextId);
    const { bytes } = await this.tiers.demote(contextId, tier);
    this.observer?.transferred(tier === 'host' ? 'to-host' : 'to-disk', bytes);
    return bytes;
  }

  /** A turn's checkpoint: spills; false when the disk was full (see turn()). */
  private async spillUnlessDiskFull(contextId: string): Promise<boolean> {
    try {
      await this.tiers.spill(contextId);
      return true;
    } catch (err) {
      if (!isFabricError(err, 'STORAGE_FULL')) throw err;
      this.observer?.checkpointSkipped();
      return false;
    }
  }

  /** Frees a held context and forgets it (see release()); returns the tokens it held. */
  private async free(contextId: string, claims: CapabilityClaims): Promise<number> {
    await this.turns.settled(contextId);
    const tokens = this.tiers.contextStats(contextId).tokens;
    await this.tiers.release(contextId);
    await this.prefixes?.released(contextId);
    await this.forget(contextId, claims);
    return tokens;
  }

  /** The engine's hot copy follows the context off this worker's device: the next turn reads the stored pages. */
  private dropEngineCopy(contextId: string): void {
    void this.engine.release(contextId).catch(() => undefined); // no copy to drop is no failure
  }

  private async forget(contextId: string, claims: CapabilityClaims): Promise<void> {
    this.dropEngineCopy(contextId);
    await this.capabilities.revoke(contextId, claims.epoch + 1);
    await this.grants.delete(contextId);
    this.tenants.delete(contextId);
    this.custodians.forget(contextId);
  }
}

/** The grant's record of the fork that creates a context, when a fork's token creates it. */
function forkOf(claims: CapabilityClaims): { fork?: string } {
  return claims.fork === undefined ? {} : { fork: claims.fork };
}

/** Whether the grant is the one this fork's child token made (same tenant, agent and fork). */
function madeBy(grant: { tenant: string; agentId: string; fork?: string }, claims: CapabilityClaims): boolean {
  return grant.tenant === claims.ten && grant.agentId === claims.sub && grant.fork === claims.fork;
}

/** Runs `work` and measures it, in milliseconds to two decimals. */
async function timed<T>(work: () => Promise<T>): Promise<[T, number]> {
  const started = performance.now();
  const value = await work();
  return [value, Math.round((performance.now() - started) * 100) / 100];
}

function prefetchOutcome({ from, to }: Pick<MoveReport, 'from' | 'to'>): PrefetchOutcome {
  if (from === 'device') return 'resident';
  if (to === 'device') return 'resumed';
  if (from === 'disk' && to === 'host') return 'filled-host';
  return from === 'host' ? 'stopped-host' : 'stopped-disk';
}
