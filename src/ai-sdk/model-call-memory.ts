// The KV of AI SDK agents on one worker. An AI SDK call sends the whole conversation every time; this
// keeps what the model computed for the calling workflow's run (model-call-owner.ts) in kvfabric's pages
// and, hot, in the engine, and continues the longest prefix of each prompt that it holds: only the rest
// is evaluated. A prompt that departs from what was stored (an edited history, another system prompt)
// continues only the prefix they share, compared token by token, never more.
//
// As with agent turns, a call answers before its KV leaves the engine: the engine's save of the new rows
// into the pages, and the durable copy in the cold tier after it, run write-behind; the next call of the
// same run waits for them. A context whose pages are lost is rebuilt from the prompt: it is all there.
// An idle run's KV leaves the engine and the pages go to host memory, then to disk, on the timers of
// kvfabric's agents (idle to warm, warm to cold); its next call brings it back, or a planned wake-up's
// prefetch before it (prefetch: docs/ai-sdk.md#planned-wake-ups).
//
// A run's first call (its context empty) takes the longest prefix of its prompt that another run, or an
// agent, of the same tenant already computed on this worker (src/prefix-sharing), as an agent's first turn
// does, and publishes its prompt's full blocks for the next: a workflow that runs the same instructions
// for every ticket prefills them once. Another tenant's prompts are never found (the keys are salted).
import type {
  ChatMessage,
  Engine,
  EngineCompletionRequest,
  EngineCompletionResult,
  GenerationSettings,
  StoredContext,
  StructuredReply,
} from '../engines/engine';
import { sharedPrefix } from '../engines/shared-prefix';
import { FabricError } from '../fabric/errors';
import type { ContextHandle } from '../fabric/types';
import { saveEngineRows } from '../agent-memory/engine-save';
import { WriteBehind } from '../agent-memory/write-behind';
import type { TenantRegistry } from '../shared-directory/tenant-registry';
import type { ColdStore } from '../tiers/cold';
import type { TieredMemory } from '../tiers/tiered-memory';
import type { PrefixSharing } from '../prefix-sharing/prefix-sharing';
import type { CarriedReplyIds } from './carried-reply-ids';
import { MODEL_CALL_CONTEXT_PREFIX, modelCallContextId, type ModelCallOwner } from './model-call-owner';
import { modelCallNoteOf, ownerInNote, REMEMBERED_REPLIES, replyIdsIn, type ModelCallNote } from './model-call-note';
import { MAX_WAKE_HOLD_MS, prefetchOutcomeOf, type ModelCallPrefetch } from './model-call-prefetch';
import type { ModelCallSharing } from './model-call-sharing';

export interface ModelCallMemoryOptions {
  tiers: TieredMemory;
  /** The cold tier's manifests: a call finds its run's context there when another worker held it. */
  cold: Pick<ColdStore, 'hasManifest' | 'listManifests' | 'readManifest'>;
  engine: Engine;
  tenantIds: TenantRegistry;
  /** Seals the reply ids a response carries, and checks those a prompt carries back (the worker's master keys). */
  carriedReplies: CarriedReplyIds;
  /**
   * How long a run's KV stays in the engine after its last call, then in host memory before disk
   * (the worker plugin passes the agents' timers); absent: it stays until the run is freed.
   */
  idle?: { toHostMs: number; toDiskMs: number };
  /** A write-behind or idle move that failed (the next call evaluates what the pages lack): for the worker's log. */
  onBackgroundError?: (what: string, err: unknown) => void;
  /**
   * The worker's prefix sharing within a tenant: the agents' own (AgentMemory.prefixSharing), so that one
   * index knows every holder and no agent memory takes a run's holder for a context of its own. Absent: none.
   */
  prefixes?: PrefixSharing;
}

export interface ModelCallRequest {
  /** The conversation, sending a reply the context remembers (`replyIds` by its text) as its token ids. */
  messages(replyIds: (text: string) => Uint32Array | undefined): ChatMessage[];
  generation?: GenerationSettings;
  structured?: StructuredReply;
  /** The text the reply comes back as in the next call's prompt, from the text the model wrote. */
  replyText(text: string): string;
  /** Told the reply's text as it is generated (streaming). */
  onText?: (delta: string) => void;
  /** Stops the reply early (a cancelled call). */
  signal?: AbortSignal;
  /** Whether a run's first call takes its tenant's shared prefix (model-call-sharing.ts); 'tenant' when absent. */
  sharing?: ModelCallSharing;
}

export interface ModelCallResult extends EngineCompletionResult {
  contextId: string;
  /** Of `reusedTokens`, those taken from the tenant's shared prefix (a run's first call); absent or 0 otherwise. */
  sharedTokens?: number;
}

/** What runs a model call for the language model: kvfabric's memory, or a baseline that keeps no KV. */
export interface ModelCalls {
  complete(owner: ModelCallOwner, request: ModelCallRequest): Promise<ModelCallResult>;
  /** What seals and checks the reply ids responses carry. */
  readonly carriedReplies: CarriedReplyIds;
}

export class ModelCallMemory implements ModelCalls {
  readonly carriedReplies: CarriedReplyIds;
  private readonly writeBehind: WriteBehind;
  /** Each held context's pending idle move. */
  private readonly idleTimers = new Map<string, NodeJS.Timeout>();
  /**
   * Each run's model call and wake-up prefetch running now: a prefetch waits for the call before it, a call
   * for the prefetch before it, so the two never load or extend one context in the engine at once.
   */
  private readonly callsRunning = new Map<string, Promise<unknown>>();
  private readonly prefetchesRunning = new Map<string, Promise<unknown>>();

  constructor(private readonly options: ModelCallMemoryOptions) {
    this.carriedReplies = options.carriedReplies;
    this.writeBehind = new WriteBehind((contextId, err) =>
      options.onBackgroundError?.(`saving a model call of ${contextId} into its pages`, err),
    );
  }

  complete(owner: ModelCallOwner, request: ModelCallRequest): Promise<ModelCallResult> {
    const contextId = modelCallContextId(owner);
    return runAfter(this.callsRunning, contextId, this.prefetchesRunning.get(contextId), () => this.completeNow(owner, contextId, request));
  }

  private async completeNow(owner: ModelCallOwner, contextId: string, request: ModelCallRequest): Promise<ModelCallResult> {
    const { tiers, engine } = this.options;
    this.stopIdleTimer(contextId);
    await this.writeBehind.settled(contextId);
    await this.hold(contextId, owner.tenant);
    const held = tiers.contextStats(contextId).tokens;
    const note = modelCallNoteOf(contextId, tiers.attachment(contextId), held);
    const replies = note?.replies ?? [];
    const prompt = engine.renderConversation(request.messages(replyIdsIn(replies)));
    if (prompt.length === 0) throw new FabricError('INVALID_ARGUMENT', 'a model call needs a prompt');
    const { prefixes } = this.options;
    const sharing = held === 0 && request.sharing !== 'none' && prefixes !== undefined;
    const completion = sharing
      ? await this.firstCallSharing(prefixes, owner, contextId, prompt, request)
      : await this.continueStored(contextId, note, prompt, request);
    const { result } = completion;
    const remembered = [...replies, { text: request.replyText(result.text), ids: Array.from(result.reply) }].slice(-REMEMBERED_REPLIES);
    const handle = tiers.handle(contextId);
    this.writeBehind.after(contextId, async () => {
      const stored = await completion.stored(handle);
      await this.save(owner, contextId, handle, stored, result.tokens, remembered);
      this.startIdleTimer(contextId, 'host');
    });
    return { ...result, contextId, sharedTokens: completion.sharedTokens };
  }

  /** The call continuing the longest prefix of its prompt that the run's own KV holds (hot or in the pages). */
  private async continueStored(contextId: string, note: ModelCallNote | undefined, prompt: Uint32Array, request: ModelCallRequest) {
    const { tiers, engine } = this.options;
    const stored = note?.tokens ?? [];
    const reused = Math.min(sharedPrefix(stored, prompt), prompt.length - 1);
    const result = await engine.complete({
      key: contextId,
      context: {
        tokens: prompt.slice(0, reused),
        storedTokens: reused,
        fingerprint: note?.fingerprint ?? engine.fingerprint,
        writeKv: (file, pieces) => tiers.writePlaneMajor(contextId, file, reused, pieces),
      },
      prompt,
      ...completionSettings(request),
    });
    return { result, stored: async (): Promise<readonly number[]> => stored, sharedTokens: 0 };
  }

  /**
   * A run's first call: its empty context takes the tenant's longest shared prefix of the prompt
   * (PrefixSharing.take, the run's owner in the pages' note from the start) and the call evaluates the
   * rest; its write-behind publishes the prompt's full blocks for the next run before saving the rest
   * (`stored`: the token ids the pages then hold). Its usage counts what the tenant's holders gave as
   * reused. A call that fails leaves the context empty again.
   */
  private async firstCallSharing(
    prefixes: PrefixSharing,
    owner: ModelCallOwner,
    contextId: string,
    prompt: Uint32Array,
    request: ModelCallRequest,
  ) {
    const note: Pick<ModelCallNote, 'owner' | 'replies'> = { owner, replies: [] };
    const taken = await prefixes.take(contextId, owner.tenant, prompt, note);
    const result = await this.options.engine
      .complete({
        key: contextId,
        context: prefixes.storedPrefix(contextId, prompt.subarray(0, taken.shared)),
        prompt,
        ...completionSettings(request),
      })
      .catch(async (err: unknown) => {
        await prefixes.abandon(contextId);
        throw err;
      });
    const stored = async (handle: ContextHandle): Promise<readonly number[]> =>
      Array.from(prompt.subarray(0, await prefixes.publish(contextId, handle, prompt, taken, note)));
    return { result, stored, sharedTokens: taken.shared };
  }

  /**
   * A planned wake-up's prefetch of the run's KV (docs/ai-sdk.md#planned-wake-ups), as an agent's is
   * (AgentMemory.resume with roomOnly): the KV adopted from the cold tier when another worker wrote it
   * last, then up as far as room that is free already takes it, evicting nothing
   * (TieredMemory.promoteIntoFreeRoom); on the device it is loaded into the engine, so the next call
   * continues it hot. Short of the device nothing is loaded: the call does that. A run with no KV anywhere
   * gets `none`, and nothing is made for it. The idle timers start again from `neededAt` (at most
   * MAX_WAKE_HOLD_MS ahead): unused, the KV falls back as if a call had ended at the planned instant.
   */
  prefetch(owner: ModelCallOwner, request: { neededAt: number }): Promise<ModelCallPrefetch> {
    const contextId = modelCallContextId(owner);
    return runAfter(this.prefetchesRunning, contextId, this.callsRunning.get(contextId), () => this.prefetchNow(owner, contextId, request));
  }

  private async prefetchNow(owner: ModelCallOwner, contextId: string, { neededAt }: { neededAt: number }): Promise<ModelCallPrefetch> {
    const { tiers, engine } = this.options;
    this.stopIdleTimer(contextId);
    await this.writeBehind.settled(contextId);
    const started = performance.now();
    if (!(await this.hold(contextId, owner.tenant, { create: false })) || tiers.contextStats(contextId).tokens === 0) {
      return { outcome: 'none', bytes: 0, ms: 0, contextBytes: 0 };
    }
    const moved = await tiers.promoteIntoFreeRoom(contextId);
    if (moved.to === 'device') await engine.load(contextId, this.storedContext(contextId));
    const ms = Math.round((performance.now() - started) * 100) / 100;
    const idleFrom = Math.min(Math.max(neededAt - Date.now(), 0), MAX_WAKE_HOLD_MS);
    if (moved.to !== 'disk') this.startIdleTimer(contextId, moved.to === 'device' ? 'host' : 'disk', idleFrom);
    return { outcome: prefetchOutcomeOf(moved), bytes: moved.bytes, ms, contextBytes: tiers.contextStats(contextId).bytes };
  }

  /** The run's stored KV as the engine loads it: every token's KV is in the pages. */
  private storedContext(contextId: string): StoredContext {
    const { tiers } = this.options;
    const held = tiers.contextStats(contextId).tokens;
    const note = modelCallNoteOf(contextId, tiers.attachment(contextId), held);
    return {
      tokens: Uint32Array.from(note?.tokens ?? []),
      storedTokens: held,
      ...(note ? { fingerprint: note.fingerprint } : {}),
      writeKv: (file, pieces) => tiers.writePlaneMajor(contextId, file, held, pieces),
    };
  }

  /** Frees the run's KV here and in the cold tier; false when there was none. */
  async release(owner: ModelCallOwner): Promise<boolean> {
    const { tiers, engine, cold } = this.options;
    const contextId = modelCallContextId(owner);
    this.stopIdleTimer(contextId);
    await this.writeBehind.settled(contextId);
    await engine.release(contextId);
    await this.options.prefixes?.released(contextId);
    if (tiers.has(contextId)) {
      await tiers.release(contextId);
      return true;
    }
    if (!(await cold.hasManifest(contextId))) return false;
    await tiers.discard(contextId);
    return true;
  }

  /**
   * Frees the KV of every run that has ended (`ended`: the run is closed, or gone from the server), here
   * and in the cold tier, whichever worker wrote it: the owner is in each context's note. Also this
   * worker's copies of runs another worker freed. Returns the context ids freed. A manifest this worker
   * cannot read is left alone.
   */
  async releaseEnded(ended: (owner: ModelCallOwner) => Promise<boolean>): Promise<string[]> {
    const { tiers, cold } = this.options;
    const owners = new Map<string, ModelCallOwner>();
    for (const contextId of tiers.contextIds()) {
      const owner = contextId.startsWith(MODEL_CALL_CONTEXT_PREFIX) ? ownerInNote(tiers.attachment(contextId)) : undefined;
      if (owner) owners.set(contextId, owner);
    }
    for (const contextId of await cold.listManifests()) {
      if (!contextId.startsWith(MODEL_CALL_CONTEXT_PREFIX) || owners.has(contextId)) continue;
      const manifest = await cold.readManifest(contextId).catch(() => undefined);
      const owner = ownerInNote(manifest?.attachment);
      if (owner) owners.set(contextId, owner);
    }
    const released: string[] = [];
    for (const contextId of owners.keys()) {
      // Freed by another worker (a run's releaseModelMemory runs on any): its durable copy is gone, so this one goes too.
      if (!tiers.has(contextId) || tiers.durableVersion(contextId) === 0 || (await cold.hasManifest(contextId))) continue;
      await this.writeBehind.settled(contextId);
      await this.options.engine.release(contextId);
      await this.options.prefixes?.released(contextId);
      if (tiers.has(contextId)) await tiers.dropLocalCopy(contextId);
      owners.delete(contextId);
      released.push(contextId);
    }
    for (const [contextId, owner] of owners) {
      // A note naming another context's owner is not this context's to judge.
      if (modelCallContextId(owner) !== contextId || !(await ended(owner))) continue;
      if (await this.release(owner)) released.push(contextId);
    }
    return released;
  }

  /** Resolves once every call's write-behind has run (the drain at shutdown); idle moves stop. */
  settled(): Promise<void> {
    for (const contextId of [...this.idleTimers.keys()]) this.stopIdleTimer(contextId);
    return this.writeBehind.allSettled();
  }

  /**
   * After `idle.toHostMs` the KV leaves the engine for host memory, after `idle.toDiskMs` more for disk;
   * `laterMs` more when the idle time starts later than now (a prefetch's planned instant).
   */
  private startIdleTimer(contextId: string, tier: 'host' | 'disk', laterMs = 0): void {
    this.stopIdleTimer(contextId);
    const { idle, tiers, engine } = this.options;
    if (!idle) return;
    const timer = setTimeout(
      () => {
        this.idleTimers.delete(contextId);
        // Queued like a write-behind: a call that came meanwhile runs first, and this one then finds it busy no more.
        this.writeBehind.after(contextId, async () => {
          if (this.idleTimers.has(contextId) || !tiers.has(contextId)) return; // a call came, or the context went
          await engine.release(contextId);
          await tiers.demote(contextId, tier);
          if (tier === 'host') this.startIdleTimer(contextId, 'disk');
        });
      },
      laterMs + (tier === 'host' ? idle.toHostMs : idle.toDiskMs),
    );
    timer.unref();
    this.idleTimers.set(contextId, timer);
  }

  private stopIdleTimer(contextId: string): void {
    clearTimeout(this.idleTimers.get(contextId));
    this.idleTimers.delete(contextId);
  }

  /**
   * The run's context here: held already, adopted from the cold tier (another worker held it, or has
   * written a newer copy since this one last did: the run's calls go to any worker), or new unless
   * `create` is false. Whether the run now has a context here.
   */
  private async hold(contextId: string, tenant: string, { create = true }: { create?: boolean } = {}): Promise<boolean> {
    const { tiers, cold, tenantIds } = this.options;
    const tenantId = await tenantIds.idOf(tenant);
    if (tiers.has(contextId)) {
      const onDisk = await cold.readManifest(contextId, { expectedTenant: tenantId }).catch(() => undefined);
      if (!onDisk || onDisk.version <= tiers.durableVersion(contextId)) return true;
      await this.options.engine.release(contextId);
      await this.options.prefixes?.released(contextId);
      await tiers.dropLocalCopy(contextId);
    }
    try {
      if (await cold.hasManifest(contextId)) await tiers.recover(contextId, { expectedTenant: tenantId });
      else if (create) tiers.create(contextId, tenantId);
    } catch (err) {
      // Another call of the same run made or adopted it meanwhile: that one is as good.
      if (!tiers.has(contextId)) throw err;
    }
    return tiers.has(contextId);
  }

  /**
   * The engine's KV of `tokens` into pages holding `stored` (engine-save.ts): the new rows appended when
   * the pages are a prefix of them, else the pages made again from the whole context. Then the durable copy.
   */
  private async save(
    owner: ModelCallOwner,
    contextId: string,
    handle: ContextHandle,
    stored: readonly number[],
    tokens: Uint32Array,
    replies: ModelCallNote['replies'],
  ): Promise<void> {
    const { tiers, engine } = this.options;
    const remake = sharedPrefix(stored, tokens) !== stored.length;
    const note: Omit<ModelCallNote, 'fingerprint' | 'tokens'> = { owner, replies };
    await saveEngineRows({ tiers, engine, contextId, handle, held: stored.length, tokens, remake, note, checkpoint: true });
  }
}

/** Runs `work` once `before` has settled, as `running`'s entry for the context until it has settled itself. */
function runAfter<T>(
  running: Map<string, Promise<unknown>>,
  contextId: string,
  before: Promise<unknown> | undefined,
  work: () => Promise<T>,
): Promise<T> {
  const run = (async () => {
    await before?.catch(() => undefined);
    return work();
  })();
  running.set(contextId, run);
  const forget = () => {
    if (running.get(contextId) === run) running.delete(contextId);
  };
  run.then(forget, forget);
  return run;
}

/** What a call asks of the engine besides its context and prompt. */
function completionSettings(request: ModelCallRequest): Omit<EngineCompletionRequest, 'key' | 'context' | 'prompt'> {
  return {
    ...(request.generation ? { generation: request.generation } : {}),
    ...(request.structured ? { structured: request.structured } : {}),
    ...(request.onText ? { onText: request.onText } : {}),
    ...(request.signal ? { signal: request.signal } : {}),
  };
}
