// An agent's first model turn on a worker that shares prefixes within a tenant: the longest run of the
// prompt's full blocks that the tenant's holders already have is taken by reference (a fork of the
// holder's pages, copy on write), the rest of the prompt's full blocks is evaluated, saved into the pages
// and published as a holder for the next agent; the call then evaluates only what follows. What is
// shared is KV the same engine computed for the same tokens, so the reply is the one a whole evaluation
// gives at batch settings that make whole and continued evaluations identical (docs/ai-sdk.md).
import type { Engine, StoredContext } from '../engines/engine';
import { isFabricError } from '../fabric/errors';
import type { TieredMemory } from '../tiers/tiered-memory';
import { PrefixIndex } from './prefix-index';
import { prefixKeys, type TenantSalts } from './prefix-keys';

export type SharingTiers = Pick<
  TieredMemory,
  'append' | 'contextStats' | 'create' | 'fork' | 'handle' | 'has' | 'release' | 'sharePrefix' | 'writePlaneMajor'
>;

/** The pages a first turn starts from: `pages` tokens of its prompt, `shared` of them taken from a holder. */
export interface PreparedPrefix {
  pages: number;
  shared: number;
}

export class PrefixSharing {
  readonly index = new PrefixIndex();

  constructor(private readonly options: { salts: TenantSalts; tokensPerBlock: number; tiers: SharingTiers; engine: Engine }) {}

  /** A holder's context id, named by its last block's key (a salted hash: it tells nothing of the tokens). */
  static holderId(lastKey: string): string {
    return `prefix-${lastKey.slice(0, 48)}`;
  }

  /**
   * Gives the empty context `contextId` of `tenant` the KV of the longest prefix of `prompt` made of full
   * blocks, all but the prompt's last token at least (the call evaluates one): shared where the tenant's
   * holders have it, evaluated and published otherwise. On failure the context is empty again.
   */
  async prepare(contextId: string, tenant: string, prompt: Uint32Array): Promise<PreparedPrefix> {
    const { tiers, engine, tokensPerBlock } = this.options;
    const keys = prefixKeys(prompt.subarray(0, prompt.length - 1), {
      fingerprint: engine.fingerprint,
      salt: this.options.salts.of(tenant),
      tokensPerBlock,
    });
    if (keys.length === 0) return { pages: 0, shared: 0 };
    try {
      const hit = this.index.longest(keys, (holderId) => tiers.has(holderId));
      const shared = (hit?.blocks ?? 0) * tokensPerBlock;
      if (hit) {
        await tiers.sharePrefix(contextId, hit.holderId, hit.blocks, this.noteOf(prompt.subarray(0, shared)));
        this.index.refer(hit.holderId, contextId);
      }
      const pages = keys.length * tokensPerBlock;
      if (pages > shared) await this.publish(contextId, prompt.subarray(0, pages), shared, keys);
      return { pages, shared };
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

  /** The note of pages holding `tokens` (src/agent-memory/engine-note.ts): this engine's fingerprint and their ids. */
  private noteOf(tokens: Uint32Array): { fingerprint: Engine['fingerprint']; tokens: number[] } {
    return { fingerprint: this.options.engine.fingerprint, tokens: Array.from(tokens) };
  }

  /** Evaluates prefix[shared..] after the shared pages, saves it into them and forks a holder of the whole prefix. */
  private async publish(contextId: string, prefix: Uint32Array, shared: number, keys: readonly string[]): Promise<void> {
    const { tiers, engine } = this.options;
    await engine.load(contextId, { ...this.storedPrefix(contextId, prefix.subarray(0, shared)), tokens: prefix });
    const rows = await engine.save(contextId, shared);
    await tiers.append(contextId, rows.kv, this.noteOf(prefix), tiers.handle(contextId));
    const holderId = PrefixSharing.holderId(keys[keys.length - 1]!);
    try {
      await tiers.fork(contextId, holderId);
    } catch (err) {
      if (isFabricError(err, 'INVALID_ARGUMENT')) return; // the id is taken: this prefix goes unpublished
      throw err;
    }
    this.index.publish(holderId, keys, contextId);
  }

  /**
   * Undoes prepare() for a first turn that failed after it: the context is empty again (a retry starts
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
