// A first model call on an empty context (an agent's first turn, an AI SDK run's first call) on a worker
// that shares prefixes within a tenant. Before the call, the longest run of the prompt's full blocks that
// the tenant's holders already have is taken by reference (a fork of the holder's pages, copy on write),
// and the call evaluates only what follows, in one go. After the reply, off its path (the caller's
// write-behind), the engine's rows of the prompt's other full blocks are saved into the pages and the
// whole is published as a holder for the next call. What is shared is KV the same engine computed for
// the same tokens, so the reply is the one a whole evaluation gives at batch settings that make whole and
// continued evaluations identical (docs/ai-sdk.md#identical-replies).
// With a cold tier, a prefix no holder here has is looked for there (cold-prefixes.ts) before the call
// prefills it, and each published holder is written there, off the call's path. A holder nothing refers
// to any more stays findable for an idle time, then goes from memory and from the cold tier.
import type { ContextKv, Engine, StoredContext } from '../engines/engine';
import { sameTokens } from '../engines/shared-prefix';
import { FabricError, isFabricError } from '../fabric/errors';
import type { ContextHandle } from '../fabric/types';
import type { ColdStore } from '../tiers/cold';
import type { TieredMemory } from '../tiers/tiered-memory';
import { ColdPrefixes, type ColdPrefixTiers } from './cold-prefixes';
import { PrefixIndex, type PrefixHit } from './prefix-index';
import { prefixKeys, type TenantSalts } from './prefix-keys';
import { holderIdOf, isColdPrefixId } from './prefix-names';

export type SharingTiers = ColdPrefixTiers & Pick<TieredMemory, 'fork' | 'handle' | 'writePlaneMajor'>;

/**
 * How long a holder nothing refers to stays findable before it is freed, here and in the cold tier: ten
 * minutes, so agents of a fleet that start minutes apart (a queue's next batch, a retried workflow) still
 * share, while a prefix no one uses gives its blocks back within a housekeeping period.
 */
export const DEFAULT_PREFIX_IDLE_MS = 600_000;
/**
 * How much older than the idle time a cold prefix may be before any worker's housekeeping deletes it: a
 * dead worker's copies have no expiry left to delete them. A holder in use that long loses its copy, and
 * the next worker without the prefix prefills it once and writes it again.
 */
export const COLD_PREFIX_GRACE_MS = 3_600_000;
/**
 * How long a first call waits for another first call of the same prefix to publish it, instead of
 * prefilling the same blocks beside it; past this it prefills them itself (a stuck or very long prefill).
 */
export const PREFILL_WAIT_MS = 60_000;
/** A timer's limit (2^31 - 1 ms, about 24 days): a longer one would fire at once. */
const MAX_IDLE_MS = 2 ** 31 - 1;

export interface PrefixSharingOptions {
  salts: TenantSalts;
  tokensPerBlock: number;
  tiers: SharingTiers;
  engine: Engine;
  /** The cold tier: prefixes are then found across workers and restarts. Absent: this worker's only. */
  cold?: Pick<ColdStore, 'hasManifest' | 'listManifests' | 'readManifest'>;
  /** A holder nothing refers to is freed after this long (default DEFAULT_PREFIX_IDLE_MS; 0: at once). */
  idleMs?: number;
  /** Cold-tier work that failed (a prefix not written, a cold copy refused: the call prefilled): for the worker's log. */
  onBackgroundError?: (what: string, err: unknown) => void;
}

/**
 * What a first call took: `shared` tokens of its prompt from a holder (the pages hold them), out of the
 * `pages` tokens of its full blocks (all but the prompt's last token: a call evaluates one) whose keys are `keys`.
 */
export interface TakenPrefix {
  shared: number;
  pages: number;
  keys: readonly string[];
}

export class PrefixSharing {
  readonly index = new PrefixIndex();
  private readonly coldPrefixes: ColdPrefixes | undefined;
  /** Idle holders' expiry timers. */
  private readonly idleTimers = new Map<string, NodeJS.Timeout>();
  /** Cold-tier writes and expiries in flight, by holder: an expiry waits for the holder's write. */
  private readonly pending = new Map<string, Promise<void>>();
  /** First calls prefilling blocks no holder has, by each key they will publish: a call of the same prefix waits for them. */
  private readonly prefilling = new Map<string, Promise<void>>();
  /** Each such call's end (publish, abandon or release), by context. */
  private readonly prefillEnds = new Map<string, () => void>();

  constructor(private readonly options: PrefixSharingOptions) {
    const { cold, tiers, tokensPerBlock, engine, idleMs } = options;
    if (idleMs !== undefined && !(Number.isSafeInteger(idleMs) && idleMs >= 0 && idleMs <= MAX_IDLE_MS)) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        `the prefix idle time is a whole number of ms in [0, ${MAX_IDLE_MS}], got ${String(idleMs)}`,
      );
    }
    this.coldPrefixes =
      cold &&
      new ColdPrefixes({ tiers, cold, tokensPerBlock, fingerprint: engine.fingerprint, noteOf: (tokens) => this.noteOf(tokens, {}) });
  }

  /**
   * Gives the empty context `contextId` of `tenant` the KV of the longest run of `prompt`'s full blocks
   * that the tenant's holders have, if any. `note`: what the caller's note of the pages holds beside the
   * fingerprint and token ids (an AI SDK run's owner), so the pages are never without it. The call then
   * continues storedPrefix(contextId, prompt.subarray(0, shared)). On failure the context is empty again.
   */
  async take(contextId: string, tenant: string, prompt: Uint32Array, note: object = {}): Promise<TakenPrefix> {
    const { tiers, engine, tokensPerBlock } = this.options;
    const keys = prefixKeys(prompt.subarray(0, prompt.length - 1), {
      fingerprint: engine.fingerprint,
      salt: this.options.salts.of(tenant),
      tokensPerBlock,
    });
    try {
      const longest = () => (keys.length > 0 ? this.index.longest(keys, (holderId) => tiers.has(holderId)) : undefined);
      await this.othersPrefill(keys, () => longest()?.blocks ?? 0);
      // At once after the wait (no await between): a call of the same prefix from now on waits for this one.
      this.prefills(contextId, keys.slice(longest()?.blocks ?? 0));
      const adopted = await this.adopted(contextId, keys, prompt, longest()?.blocks ?? 0);
      // Looked up again after the wait, and referred to before the next: an idle holder may have expired meanwhile.
      const hit = adopted ?? longest();
      const shared = (hit?.blocks ?? 0) * tokensPerBlock;
      if (hit) {
        this.refer(hit.holderId, contextId); // first: an idle holder must not expire while it is being lent
        await tiers.sharePrefix(contextId, hit.holderId, hit.blocks, this.noteOf(prompt.subarray(0, shared), note));
      }
      return { shared, pages: keys.length * tokensPerBlock, keys };
    } catch (err) {
      await this.abandon(contextId);
      throw err;
    }
  }

  /**
   * Waits, at most PREFILL_WAIT_MS in all, until no first call is prefilling `keys` past the blocks a
   * holder here has (`known()`, looked up after each wait): a fleet of agents starting at once prefills
   * its common prefix once, not once each.
   */
  private async othersPrefill(keys: readonly string[], known: () => number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), PREFILL_WAIT_MS);
      timer.unref();
    });
    try {
      for (;;) {
        const prefill = keys.slice(known()).find((key) => this.prefilling.has(key));
        if (prefill === undefined || (await Promise.race([this.prefilling.get(prefill)!, deadline])) === 'late') return;
      }
    } finally {
      clearTimeout(timer);
    }
  }

  /** Marks `contextId` as prefilling the blocks of `keys` (no holder has them) until it publishes, is abandoned or released. */
  private prefills(contextId: string, keys: readonly string[]): void {
    if (keys.length === 0) return;
    let end!: () => void;
    const prefill = new Promise<void>((resolve) => {
      end = resolve;
    });
    for (const key of keys) if (!this.prefilling.has(key)) this.prefilling.set(key, prefill);
    this.prefillEnds.set(contextId, () => {
      for (const key of keys) if (this.prefilling.get(key) === prefill) this.prefilling.delete(key);
      this.prefillEnds.delete(contextId);
      end();
    });
  }

  /** The context's prefill (prefills) is over: calls waiting for it look again. */
  private prefillEnded(contextId: string): void {
    this.prefillEnds.get(contextId)?.();
  }

  /** The pages' first `tokens` tokens as a stored context of this engine. */
  storedPrefix(contextId: string, tokens: Uint32Array): StoredContext {
    const { tiers, engine } = this.options;
    return {
      tokens,
      storedTokens: tokens.length,
      fingerprint: engine.fingerprint,
      writeKv: (file, pieces) => tiers.writePlaneMajor(contextId, file, tokens.length, pieces),
    };
  }

  /**
   * After the call that took `taken`, while the engine's hot copy still holds its prompt: saves the
   * engine's rows of the prompt's full blocks past the shared ones into the pages of incarnation `handle`
   * and publishes them as a holder. Returns the tokens the pages hold then: `taken.pages`, or
   * `taken.shared` when there was nothing to save or the engine let go, or another incarnation (nothing
   * published); the caller's save of the rest goes on from there.
   */
  async publish(contextId: string, handle: ContextHandle, prompt: Uint32Array, taken: TakenPrefix, note: object = {}): Promise<number> {
    try {
      return await this.publishPages(contextId, handle, prompt, taken, note);
    } finally {
      this.prefillEnded(contextId); // published or not: a call waiting for it finds what there is
    }
  }

  private async publishPages(
    contextId: string,
    handle: ContextHandle,
    prompt: Uint32Array,
    taken: TakenPrefix,
    note: object,
  ): Promise<number> {
    const { tiers, engine } = this.options;
    const { shared, pages, keys } = taken;
    const sameIncarnation = () => tiers.has(contextId) && tiers.handle(contextId) === handle;
    if (pages <= shared || !sameIncarnation() || tiers.contextStats(contextId).tokens !== shared) return shared;
    let saved: ContextKv;
    try {
      saved = await engine.save(contextId, shared);
    } catch (err) {
      if (isFabricError(err, 'INVALID_STATE')) return shared; // not hot any more: the caller's save finds it so too
      throw err;
    }
    const rows = pages - shared;
    if (saved.tokens.length < rows || !sameTokens(saved.tokens.subarray(0, rows), prompt.subarray(shared, pages))) {
      throw new FabricError('INTEGRITY', `context ${contextId}: the engine holds other tokens than the call's prompt`);
    }
    if (!sameIncarnation()) return shared;
    const bytesPerToken = saved.kv.byteLength / saved.tokens.length; // token-major rows
    await tiers.append(contextId, saved.kv.subarray(0, rows * bytesPerToken), this.noteOf(prompt.subarray(0, pages), note), handle);
    const holderId = holderIdOf(keys[keys.length - 1]!);
    try {
      await tiers.fork(contextId, holderId);
    } catch (err) {
      if (isFabricError(err, 'INVALID_ARGUMENT')) return pages; // the id is taken: this prefix goes unpublished
      throw err;
    }
    this.index.publish(holderId, keys, contextId);
    const cold = this.coldPrefixes;
    if (cold) {
      const tokens = prompt.slice(0, pages);
      this.track(holderId, 'writing a shared prefix to the cold tier', () => cold.store(holderId, keys, tokens));
    }
    return pages;
  }

  /**
   * Drops the context's references (it is being freed). A holder nothing refers to any more stays
   * findable for the idle time, then is freed (expire); with no idle time, at once.
   */
  async released(contextId: string): Promise<void> {
    this.prefillEnded(contextId);
    for (const holderId of this.index.drop(contextId)) {
      if (this.options.idleMs !== 0) {
        this.startIdleTimer(holderId);
        continue;
      }
      this.track(holderId, 'freeing an unused shared prefix', () => this.expire(holderId));
      await this.pending.get(holderId);
    }
  }

  /** Whether the context is a holder, or a cold prefix being written or adopted (kept off the lists of agents' contexts). */
  isHolder(contextId: string): boolean {
    return this.index.isHolder(contextId) || isColdPrefixId(contextId);
  }

  /**
   * Deletes cold prefixes older than the idle time plus COLD_PREFIX_GRACE_MS (those of dead workers), for
   * the worker's housekeeping; 0 without a cold tier. Returns how many it deleted.
   */
  sweepColdPrefixes(now = Date.now()): Promise<number> {
    const maxAgeMs = (this.options.idleMs ?? DEFAULT_PREFIX_IDLE_MS) + COLD_PREFIX_GRACE_MS;
    return this.coldPrefixes?.sweepOlderThan(maxAgeMs, now) ?? Promise.resolve(0);
  }

  /** Resolves once the cold-tier writes and expiries started so far have run. */
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.all(this.pending.values());
  }

  /** Stops the idle timers (the worker is closing: its pool goes with every holder) and waits for work in flight. */
  async close(): Promise<void> {
    for (const timer of this.idleTimers.values()) clearTimeout(timer);
    this.idleTimers.clear();
    for (const end of [...this.prefillEnds.values()]) end(); // no publication will come: waiters go on
    await this.settled();
  }

  /**
   * Frees an idle holder: its blocks (those no agent still shares) and its cold copies, which only save a
   * prefill: a worker that adopted one holds its own copy. Nothing when it is referred to again meanwhile.
   * Runs tracked, after the holder's cold write: no copy is left behind.
   */
  private async expire(holderId: string): Promise<void> {
    const keys = this.index.expire(holderId);
    if (!keys) return;
    const { tiers } = this.options;
    if (tiers.has(holderId)) await tiers.release(holderId);
    await this.coldPrefixes?.forget(keys);
  }

  /**
   * The longest run of `keys` past the `known` blocks found here that the cold tier holds for the
   * context's tenant, adopted as a holder of this worker (idle until the caller refers to it). A copy
   * the cold tier or the checks refuse is reported, and the call prefills instead.
   */
  private async adopted(contextId: string, keys: readonly string[], prompt: Uint32Array, known: number): Promise<PrefixHit | undefined> {
    if (!this.coldPrefixes || keys.length <= known) return undefined;
    const tenant = this.options.tiers.contextStats(contextId).tenant;
    try {
      const adopted = await this.coldPrefixes.adopt(tenant, keys, prompt, known);
      if (!adopted) return undefined;
      if (!this.index.isHolder(adopted.holderId)) this.index.publish(adopted.holderId, keys.slice(0, adopted.blocks));
      return adopted;
    } catch (err) {
      this.report('adopting a shared prefix from the cold tier', err);
      return undefined;
    }
  }

  /** `user` shares the holder's blocks: an idle holder is idle no more. */
  private refer(holderId: string, user: string): void {
    clearTimeout(this.idleTimers.get(holderId));
    this.idleTimers.delete(holderId);
    this.index.refer(holderId, user);
  }

  private startIdleTimer(holderId: string): void {
    clearTimeout(this.idleTimers.get(holderId));
    const timer = setTimeout(() => {
      this.idleTimers.delete(holderId);
      this.track(holderId, 'freeing an unused shared prefix', () => this.expire(holderId));
    }, this.options.idleMs ?? DEFAULT_PREFIX_IDLE_MS);
    timer.unref(); // a worker's exit does not wait for it
    this.idleTimers.set(holderId, timer);
  }

  /** Runs `work` for `holderId` after any it has in flight, off the caller's path; a failure is reported. */
  private track(holderId: string, what: string, work: () => Promise<void>): void {
    const before = this.pending.get(holderId) ?? Promise.resolve();
    const run = before
      .then(work)
      .catch((err: unknown) => this.report(what, err))
      .finally(() => {
        if (this.pending.get(holderId) === run) this.pending.delete(holderId);
      });
    this.pending.set(holderId, run);
  }

  private report(what: string, err: unknown): void {
    try {
      this.options.onBackgroundError?.(what, err);
    } catch {
      // a failing reporter must not fail the call or the chain of work behind it
    }
  }

  /** The note of pages holding `tokens` (src/agent-memory/engine-note.ts): `note`, this engine's fingerprint and their ids. */
  private noteOf(tokens: Uint32Array, note: object): { fingerprint: Engine['fingerprint']; tokens: number[] } {
    return { ...note, fingerprint: this.options.engine.fingerprint, tokens: Array.from(tokens) };
  }

  /**
   * Undoes take() for a first call that failed after it: the context is empty again (a retry starts
   * over), its references dropped and the engine's copy let go.
   */
  async abandon(contextId: string): Promise<void> {
    const { tiers, engine } = this.options;
    await this.released(contextId);
    await engine.release(contextId).catch(() => undefined); // no hot copy is no failure
    if (!tiers.has(contextId) || tiers.contextStats(contextId).tokens === 0) return;
    const tenantId = tiers.contextStats(contextId).tenant;
    await tiers.release(contextId);
    tiers.create(contextId, tenantId);
  }
}
