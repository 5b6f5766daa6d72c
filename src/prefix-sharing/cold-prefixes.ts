// Shared prefixes through the cold tier: what lets a worker that never saw a prefix (another worker's,
// or its own before a restart) take it instead of prefilling. A published holder's pages are written,
// off the call's path, as contexts of their own in the cold tier, named by the key of their last block
// (prefix-names.ts). A key is salted per tenant, so only a worker computing that tenant's keys can name
// the copy, and its manifest, sealed with the workers' keys, is bound to that name and to the tenant:
// the cold tier refuses any other (INTEGRITY, PERMISSION_DENIED), and the pages' note must hold the very
// tokens of the prompt that named it. Not every length is written, only the whole run and each power of
// two of blocks below it: a lookup then asks for at most log2(blocks) + 2 names at once and takes at least
// half of the longest run of its prompt that another worker published.
// A worker that adopts a prefix copies its pages into a holder of its own and lets go of the cold copy,
// so that copy is only a cache: deleting it costs the next worker a prefill, never a page that another
// worker's agents still read.
import { requireCompatible, type EngineFingerprint } from '../engines/fingerprint';
import { sameTokens } from '../engines/shared-prefix';
import { FabricError, isFabricError } from '../fabric/errors';
import type { TenantId } from '../fabric/types';
import type { ColdStore, ContextAttachment } from '../tiers/cold';
import type { TieredMemory } from '../tiers/tiered-memory';
import { coldPrefixIdOf, holderIdOf, isColdPrefixId } from './prefix-names';

export type ColdPrefixTiers = Pick<
  TieredMemory,
  | 'append'
  | 'attachment'
  | 'contextStats'
  | 'create'
  | 'discard'
  | 'dropLocalCopy'
  | 'has'
  | 'read'
  | 'recover'
  | 'release'
  | 'sharePrefix'
  | 'spill'
>;

export interface ColdPrefixesOptions {
  tiers: ColdPrefixTiers;
  cold: Pick<ColdStore, 'hasManifest' | 'listManifests' | 'readManifest'>;
  tokensPerBlock: number;
  fingerprint: EngineFingerprint;
  /** The note of pages holding `tokens` (the engine's fingerprint and their ids). */
  noteOf: (tokens: Uint32Array) => ContextAttachment;
}

/** A prefix adopted from the cold tier: the holder it now is on this worker, and its blocks. */
export interface AdoptedPrefix {
  holderId: string;
  blocks: number;
}

export class ColdPrefixes {
  /** Adoptions in flight by holder id: two first calls of one prompt copy it once. */
  private readonly adopting = new Map<string, Promise<AdoptedPrefix | undefined>>();
  /** Every adoption called and not yet settled: a forget waits for those called before it. */
  private readonly adoptions = new Set<Promise<unknown>>();
  /** The last forget: an adoption called after it waits for it, so it never reads copies being deleted here. */
  private forgets: Promise<void> = Promise.resolve();

  constructor(private readonly options: ColdPrefixesOptions) {}

  /** The block counts a run of `blocks` is written at, longest first: the run and every power of two below it. */
  static lengths(blocks: number): number[] {
    const lengths = blocks > 0 ? [blocks] : [];
    for (let power = 2 ** Math.floor(Math.log2(Math.max(blocks, 1))); power >= 1; power /= 2) {
      if (power < blocks) lengths.push(power);
    }
    return lengths;
  }

  /**
   * Writes holder `holderId` (its blocks have `keys`; its pages hold `tokens`) to the cold tier at each of
   * lengths(), skipping those already there. The longest goes first: it writes every block, the shorter
   * ones share its segments and add a manifest each.
   */
  async store(holderId: string, keys: readonly string[], tokens: Uint32Array): Promise<void> {
    const { tiers, cold, tokensPerBlock } = this.options;
    for (const blocks of ColdPrefixes.lengths(keys.length)) {
      const id = coldPrefixIdOf(keys[blocks - 1]!);
      if (!tiers.has(holderId)) return; // freed meanwhile: nothing left to write
      if (tiers.has(id) || (await cold.hasManifest(id))) continue;
      tiers.create(id, tiers.contextStats(holderId).tenant);
      try {
        await tiers.sharePrefix(id, holderId, blocks, this.options.noteOf(tokens.subarray(0, blocks * tokensPerBlock)));
        await tiers.spill(id);
      } catch (err) {
        if (!isFabricError(err, 'STALE_HANDLE')) throw err; // another worker wrote the same prefix first (a bucket)
      } finally {
        if (tiers.has(id)) await tiers.dropLocalCopy(id, { manifestStays: true }); // the cold copy: its manifest and segments
      }
    }
  }

  /**
   * The longest run of `keys` past `known` blocks that the cold tier holds for `tenant`, copied into a
   * holder of this worker: the holder's id and its blocks, or undefined when the cold tier has none (or
   * this worker holds that holder already, or the copy went while it was read: its expiry on another
   * worker). `prompt`: the tokens the keys were taken over. INTEGRITY or PERMISSION_DENIED for a copy
   * that is not this tenant's prefix of `prompt` (nothing is then kept).
   */
  adopt(tenant: TenantId, keys: readonly string[], prompt: Uint32Array, known: number): Promise<AdoptedPrefix | undefined> {
    const adoption = this.forgets.then(() => this.adoptNow(tenant, keys, prompt, known));
    this.adoptions.add(adoption);
    const settle = () => this.adoptions.delete(adoption);
    adoption.then(settle, settle);
    return adoption;
  }

  /**
   * Deletes the cold copies of a run of `keys` (a holder whose idle time ran out): those this worker or
   * another wrote. Another worker's holder of the same prefix is its own copy and stays. Runs after this
   * worker's adoptions called before it, so none of them reads a copy it deletes.
   */
  forget(keys: readonly string[]): Promise<void> {
    const before = [...this.adoptions];
    const run = this.forgets.then(async () => {
      await Promise.allSettled(before);
      await this.forgetNow(keys);
    });
    this.forgets = run.catch(() => undefined);
    return run;
  }

  /**
   * Deletes the cold prefixes written more than `maxAgeMs` ago that this worker is not writing or
   * adopting: a dead worker's copies, which no expiry of its holders will ever delete. Runs like a forget.
   * A live holder's copy goes too once that old: the next worker without the prefix prefills it once and
   * writes it again. Returns how many copies it deleted.
   */
  sweepOlderThan(maxAgeMs: number, now = Date.now()): Promise<number> {
    const before = [...this.adoptions];
    let deleted = 0;
    const run = this.forgets.then(async () => {
      await Promise.allSettled(before);
      const { tiers, cold } = this.options;
      for (const id of await cold.listManifests()) {
        if (!isColdPrefixId(id) || tiers.has(id)) continue;
        // Unreadable (another key ring, damage): not this worker's to judge; the read refuses it to adopters too.
        const manifest = await cold.readManifest(id).catch(() => undefined);
        if (manifest === undefined || now - Date.parse(manifest.createdAt) <= maxAgeMs) continue;
        const gone = await tiers.discard(id).then(
          () => true,
          (err: unknown) => {
            if (isFabricError(err, 'BUSY') || isFabricError(err, 'STALE_HANDLE')) return false; // taken or rewritten meanwhile
            throw err;
          },
        );
        if (gone) deleted++;
      }
    });
    this.forgets = run.catch(() => undefined);
    return run.then(() => deleted);
  }

  private async adoptNow(
    tenant: TenantId,
    keys: readonly string[],
    prompt: Uint32Array,
    known: number,
  ): Promise<AdoptedPrefix | undefined> {
    const { tiers, cold } = this.options;
    const candidates = ColdPrefixes.lengths(keys.length).filter((blocks) => blocks > known);
    // All at once: one round trip to a bucket, whichever of them are there.
    const present = await Promise.all(candidates.map((blocks) => cold.hasManifest(coldPrefixIdOf(keys[blocks - 1]!))));
    const blocks = candidates.find((_, i) => present[i]);
    if (blocks === undefined) return undefined;
    const holderId = holderIdOf(keys[blocks - 1]!);
    const inFlight = this.adopting.get(holderId);
    if (inFlight !== undefined) return inFlight;
    if (tiers.has(holderId)) return undefined;
    const lastKey = keys[blocks - 1]!;
    const adoption = this.copy(tenant, lastKey, holderId, prompt.subarray(0, blocks * this.options.tokensPerBlock)).then(
      () => ({ holderId, blocks }),
      async (err: unknown) => {
        // Deleted while it was read (its manifest goes before its segments): a miss, not damage.
        if (!(await cold.hasManifest(coldPrefixIdOf(lastKey)))) return undefined;
        throw err;
      },
    );
    this.adopting.set(holderId, adoption);
    try {
      return await adoption;
    } finally {
      this.adopting.delete(holderId);
    }
  }

  private async forgetNow(keys: readonly string[]): Promise<void> {
    const { tiers, cold } = this.options;
    for (const blocks of ColdPrefixes.lengths(keys.length)) {
      const id = coldPrefixIdOf(keys[blocks - 1]!);
      if (tiers.has(id) || !(await cold.hasManifest(id))) continue; // being written here: it stays
      await tiers.discard(id).catch((err: unknown) => {
        // Adopted here meanwhile (the next expiry deletes it), or rewritten by another worker (its copy now).
        if (!isFabricError(err, 'BUSY') && !isFabricError(err, 'STALE_HANDLE')) throw err;
      });
    }
  }

  /** Recovers the cold copy `lastKey` names, checks it is `tokens` of this tenant, copies it into `holderId`. */
  private async copy(tenant: TenantId, lastKey: string, holderId: string, tokens: Uint32Array): Promise<void> {
    const { tiers } = this.options;
    const id = coldPrefixIdOf(lastKey);
    await tiers.recover(id, { expectedTenant: tenant });
    try {
      this.requirePrefix(id, tokens);
      const kv = await tiers.read(id, 0, tokens.length);
      tiers.create(holderId, tenant);
      await tiers.append(holderId, kv, this.options.noteOf(tokens)).catch(async (err: unknown) => {
        await tiers.release(holderId);
        throw err;
      });
    } finally {
      // This process's copy only: the manifest and its segments stay for other workers.
      if (tiers.has(id)) await tiers.dropLocalCopy(id, { manifestStays: true });
    }
  }

  /** INTEGRITY unless the recovered copy holds exactly `tokens` by this engine (its note says which). */
  private requirePrefix(id: string, tokens: Uint32Array): void {
    const { tiers, fingerprint } = this.options;
    const note = tiers.attachment(id) as { tokens?: unknown; fingerprint?: EngineFingerprint } | undefined;
    const noted = note?.tokens;
    const held = tiers.contextStats(id).tokens;
    if (held !== tokens.length || !Array.isArray(noted) || noted.length !== tokens.length || !sameTokens(noted, tokens)) {
      throw new FabricError('INTEGRITY', `cold prefix ${id} does not hold the prompt whose keys name it`);
    }
    if (!note?.fingerprint) throw new FabricError('INTEGRITY', `cold prefix ${id} has no engine fingerprint`);
    requireCompatible(note.fingerprint, fingerprint);
  }
}
