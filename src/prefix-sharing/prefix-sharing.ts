// A first model call on an empty context (an agent's first turn, an AI SDK run's first call) on a worker
// that shares prefixes within a tenant. Before the call, the longest run of the prompt's full blocks that
// the tenant's holders already have is taken by reference (a fork of the holder's pages, copy on write),
// and the call evaluates only what follows, in one go. After the reply, off its path (the caller's
// write-behind), the engine's rows of the prompt's other full blocks are saved into the pages and the
// whole is published as a holder for the next call. What is shared is KV the same engine computed for
// the same tokens, so the reply is the one a whole evaluation gives at batch settings that make whole and
// continued evaluations identical (docs/ai-sdk.md#identical-replies).
import type { ContextKv, Engine, StoredContext } from '../engines/engine';
import { sameTokens } from '../engines/shared-prefix';
import { FabricError, isFabricError } from '../fabric/errors';
import type { ContextHandle } from '../fabric/types';
import type { TieredMemory } from '../tiers/tiered-memory';
import { PrefixIndex } from './prefix-index';
import { prefixKeys, type TenantSalts } from './prefix-keys';

export type SharingTiers = Pick<
  TieredMemory,
  'append' | 'contextStats' | 'create' | 'fork' | 'handle' | 'has' | 'release' | 'sharePrefix' | 'writePlaneMajor'
>;

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

  constructor(private readonly options: { salts: TenantSalts; tokensPerBlock: number; tiers: SharingTiers; engine: Engine }) {}

  /** A holder's context id, named by its last block's key (a salted hash: it tells nothing of the tokens). */
  static holderId(lastKey: string): string {
    return `prefix-${lastKey.slice(0, 48)}`;
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
      const hit = keys.length > 0 ? this.index.longest(keys, (holderId) => tiers.has(holderId)) : undefined;
      const shared = (hit?.blocks ?? 0) * tokensPerBlock;
      if (hit) {
        await tiers.sharePrefix(contextId, hit.holderId, hit.blocks, this.noteOf(prompt.subarray(0, shared), note));
        this.index.refer(hit.holderId, contextId);
      }
      return { shared, pages: keys.length * tokensPerBlock, keys };
    } catch (err) {
      await this.abandon(contextId);
      throw err;
    }
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
    const holderId = PrefixSharing.holderId(keys[keys.length - 1]!);
    try {
      await tiers.fork(contextId, holderId);
    } catch (err) {
      if (isFabricError(err, 'INVALID_ARGUMENT')) return pages; // the id is taken: this prefix goes unpublished
      throw err;
    }
    this.index.publish(holderId, keys, contextId);
    return pages;
  }

  /** Drops the context's references (it is being freed); holders nothing refers to any more are freed with them. */
  async released(contextId: string): Promise<void> {
    const { tiers } = this.options;
    for (const holderId of this.index.drop(contextId)) {
      if (tiers.has(holderId)) await tiers.release(holderId);
    }
  }

  /** Whether the context is a holder (kept off the lists of agents' contexts). */
  isHolder(contextId: string): boolean {
    return this.index.isHolder(contextId);
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
