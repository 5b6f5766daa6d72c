// Runs an agent's turn on a context this worker holds: a message through the worker's engine, or a turn
// given as a token count, whose stand-in KV an engine that takes such turns makes (the synthetic engine,
// for benchmarks and tests).
//
// A token-count turn appends its KV at once, unless the context already ends with it (an attempt on a lost
// worker applied it before its durable copy was written).
//
// A model turn answers before its KV is copied out of the engine: the reply and the turn's token ids go
// back to the workflow (its history is where they are durable at once), and the engine's save of the
// turn's rows into the pages, with the durable copy after it, runs write-behind (write-behind.ts). The
// next call on the context waits for that. Until the pages have caught up, the workflow passes the turns'
// token ids back (the tail), so any worker can rebuild the context: the pages, then the tail evaluated.
import type { Engine, StoredContext } from '../engines/engine';
import { FabricError } from '../fabric/errors';
import type { ContextHandle } from '../fabric/types';
import type { PrefixSharing } from '../prefix-sharing/prefix-sharing';
import type { TieredMemory } from '../tiers/tiered-memory';
import type { DigestState } from './context-digest';
import type { ContextVerifier } from './context-verifier';
import { conversationOf, type Conversation } from './conversation';
import { engineNoteOf, type EngineNote } from './engine-note';
import { saveEngineRows, type SaveTiers } from './engine-save';
import type { AppliedTurn, TurnInput, TurnReply } from './turn';
import { WriteBehind } from './write-behind';

type TurnTiers = SaveTiers & Pick<TieredMemory, 'attachment' | 'read' | 'writePlaneMajor'>;

export interface TurnRunnerOptions {
  tiers: TurnTiers;
  verifier: ContextVerifier;
  bytesPerToken: number;
  /** The worker's engine (src/engines/registry.ts). */
  engine: Engine;
  /** Told the bytes each turn appended. */
  appended: (bytes: number) => void;
  /** A write-behind's durable copy found the disk full (the pages stay; a later checkpoint tries again). */
  checkpointSkipped: () => void;
  /** A write-behind that failed: the pages stay behind the conversation (the tail rebuilds it). */
  onWriteBehindError: (contextId: string, err: unknown) => void;
  /** Prefix sharing within a tenant (src/prefix-sharing), with the tenant of each context; absent: none. */
  prefixes?: { sharing: PrefixSharing; tenantOf: (contextId: string) => string | undefined };
  /** Told what a first turn that could share took from a holder and what the model evaluated. */
  firstTurnPrefill?: (contextId: string, figures: { sharedTokens: number; evaluatedTokens: number }) => void;
}

export class TurnRunner {
  private readonly writeBehind: WriteBehind;
  /** Contexts whose last write-behind checkpoint found the disk full. */
  private readonly staleCopies = new Set<string>();

  constructor(private readonly options: TurnRunnerOptions) {
    this.writeBehind = new WriteBehind(options.onWriteBehindError);
  }

  /**
   * Applies turn `turn` to a context whose pages the workflow recorded as `before`, with the tail of
   * token ids it recorded after them. `checkpoint`: a model turn writes the durable copy after its
   * write-behind; a synthetic one is the caller's to checkpoint.
   */
  run(
    contextId: string,
    turn: number,
    input: TurnInput,
    before: DigestState,
    tail: readonly number[],
    checkpoint: boolean,
    sharing: 'tenant' | 'none' = 'tenant',
  ): Promise<AppliedTurn> {
    if (sharing !== 'tenant' && sharing !== 'none') {
      throw new FabricError('INVALID_ARGUMENT', `sharing is 'tenant' or 'none', not ${JSON.stringify(sharing)}`);
    }
    if ('tokens' in input) {
      if (tail.length > 0) throw new FabricError('INVALID_ARGUMENT', 'a synthetic turn has no tail of token ids');
      return this.synthetic(contextId, turn, input.tokens, before);
    }
    return this.modelTurn(contextId, input, before, tail, checkpoint, sharing);
  }

  /**
   * Runs `job` write-behind on the context: after its earlier jobs, before anything that waits for them,
   * and not before `pauseMs` have passed unless something waits for the context first.
   */
  writeBehindAfterPause(contextId: string, pauseMs: number, job: () => Promise<void>): void {
    this.writeBehind.afterPause(contextId, pauseMs, job);
  }

  /** Resolves once the context's write-behind has run: its pages are as complete as this worker can make them. */
  settled(contextId: string): Promise<void> {
    return this.writeBehind.settled(contextId);
  }

  /** Every context's write-behind (the drain at shutdown). */
  allSettled(): Promise<void> {
    return this.writeBehind.allSettled();
  }

  /** Whether a model turn's write-behind checkpoint of the context last found the disk full. */
  durableCopyStale(contextId: string): boolean {
    return this.staleCopies.has(contextId);
  }

  /**
   * Brings the pages up to the whole conversation (the workflow's `before` and `tail`): what a context
   * leaving the engine, or being forked, needs. Waits for the write-behind, then saves whatever the pages
   * still lack from the engine, loading the context into it first (pages, tail evaluated) when it let go.
   */
  async saveTail(contextId: string, record: { expected?: DigestState; tail?: readonly number[] }): Promise<void> {
    const tail = record.tail ?? [];
    if (tail.length > 0 && !record.expected) {
      throw new FabricError('INVALID_ARGUMENT', 'a tail of token ids needs the digest it follows (expected)');
    }
    await this.settled(contextId);
    if (tail.length === 0) return;
    const { note, conversation } = this.conversationNow(contextId, record.expected!, tail);
    if (conversation.stored === conversation.tokens.length) return;
    await this.options.engine.load(contextId, this.storedContext(contextId, conversation, note));
    // Checkpointed whatever the agent's durability: the workflow's record moves past these tokens' ids
    // once the caller's result comes back, so the durable copy must hold their KV by then.
    await this.saveFromEngine(
      contextId,
      this.options.tiers.handle(contextId),
      conversation.stored,
      conversation.tokens,
      note?.lastTurn,
      true,
    );
  }

  /**
   * Loads the conversation into the engine (a resume does, so the next turn is hot); nothing to do for an
   * empty context, or for pages of stand-in KV (token-count turns), which have no token ids to load.
   */
  async load(contextId: string, before: DigestState, tail: readonly number[]): Promise<void> {
    await this.settled(contextId);
    const { tiers } = this.options;
    if (tiers.attachment(contextId) === undefined && tiers.contextStats(contextId).tokens > 0) return;
    const { note, conversation } = this.conversationNow(contextId, before, tail);
    if (conversation.tokens.length === 0) return;
    await this.options.engine.load(contextId, this.storedContext(contextId, conversation, note));
  }

  private async synthetic(contextId: string, turn: number, tokens: number, before: DigestState): Promise<AppliedTurn> {
    const { tiers, engine } = this.options;
    if (!engine.standInKv)
      throw new FabricError('INVALID_ARGUMENT', `this worker runs ${engine.fingerprint.engine}: a turn takes a message, not a token count`);
    const kv = engine.standInKv(contextId, turn, tokens, this.options.bytesPerToken);
    const held = tiers.contextStats(contextId).tokens;
    let alreadyApplied = false;
    if (held === before.tokens) {
      await tiers.append(contextId, kv);
      this.options.appended(kv.byteLength);
    } else if (held === before.tokens + tokens) {
      alreadyApplied = true;
    } else {
      throw new FabricError('INTEGRITY', `context ${contextId} holds ${held} tokens; the workflow expected ${before.tokens}`);
    }
    await this.requireRecorded(contextId, before, `turn ${turn}`);
    const digest = await this.options.verifier.digestAt(contextId, before.tokens + tokens);
    const appended = alreadyApplied ? await tiers.read(contextId, before.tokens, tokens) : undefined;
    if (appended && !Buffer.from(appended.buffer, appended.byteOffset, appended.byteLength).equals(kv)) {
      throw new FabricError('INTEGRITY', `context ${contextId} ends with bytes that are not turn ${turn}`);
    }
    return { digest, alreadyApplied };
  }

  private async modelTurn(
    contextId: string,
    input: Exclude<TurnInput, { tokens: number }>,
    before: DigestState,
    tail: readonly number[],
    checkpoint: boolean,
    sharing: 'tenant' | 'none',
  ): Promise<AppliedTurn> {
    const { engine } = this.options;
    await this.settled(contextId);
    await this.requireRecorded(contextId, before, 'this turn');
    const { held, note, conversation } = this.conversationNow(contextId, before, tail);
    const total = conversation.tokens.length;
    if (held > total) {
      // Applied by an attempt whose worker was lost after its write-behind: the reply it gave is in the note.
      if (note?.lastTurn?.at !== total) {
        throw new FabricError('INTEGRITY', `context ${contextId} holds ${held} tokens; its workflow recorded ${total}`);
      }
      const digest = await this.options.verifier.digestAt(contextId, held);
      return { digest, alreadyApplied: true, reply: note.lastTurn.reply, added: note.tokens.slice(total) };
    }
    const tenant = this.options.prefixes?.tenantOf(contextId);
    if (held === 0 && total === 0 && sharing === 'tenant' && tenant !== undefined) {
      return this.firstTurnSharing(contextId, tenant, input, checkpoint);
    }
    const result = await engine.turn({
      key: contextId,
      context: this.storedContext(contextId, conversation, note),
      input: input.message,
      ...(input.generation ? { generation: input.generation } : {}),
    });
    const reply: TurnReply = { reply: result.reply, promptTokens: result.promptTokens, replyTokens: result.replyTokens };
    const digest = await this.options.verifier.digestAt(contextId, held);
    const all = new Uint32Array(total + result.added.length);
    all.set(conversation.tokens);
    all.set(result.added, total);
    const handle = this.options.tiers.handle(contextId);
    this.writeBehind.after(contextId, () => this.saveFromEngine(contextId, handle, held, all, { at: total, reply }, checkpoint));
    return { digest, alreadyApplied: false, reply, added: Array.from(result.added) };
  }

  /**
   * An empty context's first model turn, its prompt's full blocks shared within the tenant where a holder
   * has them (PrefixSharing.take), the rest evaluated by a completion: the reply and token ids are the
   * ones engine.turn gives (the same ChatML prompt). The digest is the pages' (the shared prefix) and
   * `added` every token id of the turn: the workflow's tail keeps those past the pages. The write-behind
   * publishes the prompt's full blocks for the next agent (PrefixSharing.publish), then saves the rest.
   */
  private async firstTurnSharing(
    contextId: string,
    tenant: string,
    input: Exclude<TurnInput, { tokens: number }>,
    checkpoint: boolean,
  ): Promise<AppliedTurn> {
    const { engine } = this.options;
    const sharing = this.options.prefixes!.sharing;
    const prompt = engine.renderConversation([{ role: 'user', content: input.message }]);
    const taken = await sharing.take(contextId, tenant, prompt);
    const result = await engine
      .complete({
        key: contextId,
        context: sharing.storedPrefix(contextId, prompt.subarray(0, taken.shared)),
        prompt,
        ...(input.generation ? { generation: input.generation } : {}),
      })
      .catch(async (err: unknown) => {
        await sharing.abandon(contextId);
        throw err;
      });
    this.options.firstTurnPrefill?.(contextId, { sharedTokens: taken.shared, evaluatedTokens: result.evaluatedTokens });
    const reply: TurnReply = { reply: result.text, promptTokens: prompt.length, replyTokens: result.reply.length };
    const digest = await this.options.verifier.digestAt(contextId, taken.shared);
    const handle = this.options.tiers.handle(contextId);
    this.writeBehind.after(contextId, async () => {
      const held = await sharing.publish(contextId, handle, prompt, taken);
      await this.saveFromEngine(contextId, handle, held, result.tokens, { at: 0, reply }, checkpoint);
    });
    return { digest, alreadyApplied: false, reply, added: Array.from(result.tokens) };
  }

  /**
   * The engine's KV of tokens [from, end) into pages holding `from` tokens (engine-save.ts), with the note
   * of every token id; then, when asked, the durable copy.
   */
  private async saveFromEngine(
    contextId: string,
    handle: ContextHandle,
    from: number,
    tokens: Uint32Array,
    lastTurn: EngineNote['lastTurn'],
    checkpoint: boolean,
  ): Promise<void> {
    const { tiers } = this.options;
    const note = lastTurn ? { lastTurn } : {};
    const result = await saveEngineRows({ tiers, engine: this.options.engine, contextId, handle, held: from, tokens, note, checkpoint });
    if (!result.saved) return;
    this.options.appended(result.bytes);
    if (result.durable === true) this.staleCopies.delete(contextId);
    if (result.durable === false) {
      this.staleCopies.add(contextId);
      this.options.checkpointSkipped();
    }
  }

  /** The conversation as the engine gets it: token ids, how many are in the pages, and their writer. */
  private storedContext(contextId: string, conversation: Conversation, note: EngineNote | undefined): StoredContext {
    const { engine } = this.options;
    return {
      tokens: conversation.tokens,
      storedTokens: conversation.stored,
      // An empty page set with a tail (the first turn's KV never saved): the ids came from this model.
      fingerprint: note?.fingerprint ?? engine.fingerprint,
      writeKv: (file, pieces) => this.options.tiers.writePlaneMajor(contextId, file, conversation.stored, pieces),
    };
  }

  /** The context's pages as they are (their token count and note), and the conversation they and the tail make. */
  private conversationNow(
    contextId: string,
    before: DigestState,
    tail: readonly number[],
  ): { held: number; note: EngineNote | undefined; conversation: Conversation } {
    const held = this.options.tiers.contextStats(contextId).tokens;
    const note = engineNoteOf(contextId, this.options.tiers.attachment(contextId), held);
    return { held, note, conversation: conversationOf(contextId, note, before, tail) };
  }

  /** INTEGRITY unless the context still starts as the workflow recorded before `what`. */
  private async requireRecorded(contextId: string, before: DigestState, what: string): Promise<void> {
    if (!(await this.options.verifier.matches(contextId, before))) {
      throw new FabricError('INTEGRITY', `context ${contextId} no longer matches its digest before ${what}`);
    }
  }
}
