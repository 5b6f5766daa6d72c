// Runs an agent's turn on a context this worker holds: a message through the worker's model engine, or a
// synthetic turn's stand-in KV (a token count, on a worker with no model).
//
// A synthetic turn appends its KV at once, unless the context already ends with it (an attempt on a lost
// worker applied it before its durable copy was written).
//
// A model turn answers before its KV is copied out of the engine: the reply and the turn's token ids go
// back to the workflow (its history is where they are durable at once), and the engine's save of the
// turn's rows into the pages, with the durable copy after it, runs write-behind (write-behind.ts). The
// next call on the context waits for that. Until the pages have caught up, the workflow passes the turns'
// token ids back (the tail), so any worker can rebuild the context: the pages, then the tail evaluated.
import type { ContextKv, Engine, StoredContext } from '../engines/engine';
import { syntheticKv } from '../engines/synthetic/synthetic-kv';
import { FabricError, isFabricError } from '../fabric/errors';
import type { ContextHandle } from '../fabric/types';
import type { ContextAttachment } from '../tiers/cold';
import type { TieredMemory } from '../tiers/tiered-memory';
import type { DigestState } from './context-digest';
import type { ContextVerifier } from './context-verifier';
import { conversationOf, type Conversation } from './conversation';
import { engineNoteOf, type EngineNote } from './engine-note';
import type { AppliedTurn, TurnInput, TurnReply } from './turn';
import { WriteBehind } from './write-behind';

type TurnTiers = Pick<TieredMemory, 'append' | 'attachment' | 'contextStats' | 'handle' | 'has' | 'read' | 'writePlaneMajor'>;

export interface TurnRunnerOptions {
  tiers: TurnTiers;
  verifier: ContextVerifier;
  bytesPerToken: number;
  /** The model behind message turns; absent on a worker of the synthetic engine (token-count turns). */
  engine: Engine | undefined;
  /** Told the bytes each turn appended. */
  appended: (bytes: number) => void;
  /** Writes the context's durable copy; false when the disk was full. */
  checkpoint: (contextId: string) => Promise<boolean>;
  /** A write-behind that failed: the pages stay behind the conversation (the tail rebuilds it). */
  onWriteBehindError: (contextId: string, err: unknown) => void;
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
  ): Promise<AppliedTurn> {
    if ('tokens' in input) {
      if (tail.length > 0) throw new FabricError('INVALID_ARGUMENT', 'a synthetic turn has no tail of token ids');
      return this.synthetic(contextId, turn, input.tokens, before);
    }
    return this.modelTurn(contextId, input, before, tail, checkpoint);
  }

  /**
   * Runs `job` write-behind on the context: after its earlier jobs, before anything that waits for them,
   * and not before `pauseMs` have passed unless something waits for the context first.
   */
  behind(contextId: string, pauseMs: number, job: () => Promise<void>): void {
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
    const engine = this.requireEngine();
    await engine.load(contextId, this.storedContext(contextId, conversation, note));
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
   * Loads the conversation into the engine (a resume does, so the next turn is hot); nothing to do on a
   * worker without a model or for an empty context.
   */
  async warm(contextId: string, before: DigestState, tail: readonly number[]): Promise<void> {
    const engine = this.options.engine;
    if (!engine) return;
    await this.settled(contextId);
    const { note, conversation } = this.conversationNow(contextId, before, tail);
    if (conversation.tokens.length === 0) return;
    await engine.load(contextId, this.storedContext(contextId, conversation, note));
  }

  private async synthetic(contextId: string, turn: number, tokens: number, before: DigestState): Promise<AppliedTurn> {
    const { tiers, engine } = this.options;
    if (engine)
      throw new FabricError('INVALID_ARGUMENT', `this worker runs ${engine.fingerprint.engine}: a turn takes a message, not a token count`);
    const kv = syntheticKv(contextId, turn, tokens, this.options.bytesPerToken);
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
  ): Promise<AppliedTurn> {
    const engine = this.requireEngine();
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
   * Appends the engine's KV of tokens [from, end) to pages holding `from` tokens, with the note of every
   * token id; then, when asked, the durable copy. Only to the incarnation of the context the turn ran on
   * (`handle`): one freed meanwhile, and perhaps made again under the same id for someone else, gets
   * nothing. Pages that changed meanwhile, or an engine that let go of the context, stay as they are:
   * the tail still rebuilds them.
   */
  private async saveFromEngine(
    contextId: string,
    handle: ContextHandle,
    from: number,
    tokens: Uint32Array,
    lastTurn: EngineNote['lastTurn'],
    checkpoint: boolean,
  ): Promise<void> {
    const engine = this.requireEngine();
    const { tiers } = this.options;
    const sameIncarnation = () => tiers.has(contextId) && tiers.handle(contextId) === handle;
    if (!sameIncarnation() || tiers.contextStats(contextId).tokens !== from) return;
    let saved: ContextKv;
    try {
      saved = await engine.save(contextId, from);
    } catch (err) {
      if (isFabricError(err, 'INVALID_STATE')) return; // not hot any more
      throw err;
    }
    if (!sameIds(saved.tokens, tokens.subarray(from))) {
      throw new FabricError('INTEGRITY', `context ${contextId}: the engine holds other tokens than the conversation`);
    }
    if (!sameIncarnation()) return;
    const note: EngineNote = { fingerprint: engine.fingerprint, tokens: Array.from(tokens), ...(lastTurn ? { lastTurn } : {}) };
    await tiers.append(contextId, saved.kv, note as unknown as ContextAttachment, handle);
    this.options.appended(saved.kv.byteLength);
    if (!checkpoint) return;
    if (await this.options.checkpoint(contextId)) this.staleCopies.delete(contextId);
    else this.staleCopies.add(contextId);
  }

  /** The conversation as the engine gets it: token ids, how many are in the pages, and their writer. */
  private storedContext(contextId: string, conversation: Conversation, note: EngineNote | undefined): StoredContext {
    const engine = this.requireEngine();
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

  private requireEngine(): Engine {
    const engine = this.options.engine;
    if (!engine) throw new FabricError('INVALID_ARGUMENT', 'this worker runs no model (synthetic engine): a turn takes a token count');
    return engine;
  }

  /** INTEGRITY unless the context still starts as the workflow recorded before `what`. */
  private async requireRecorded(contextId: string, before: DigestState, what: string): Promise<void> {
    if (!(await this.options.verifier.matches(contextId, before))) {
      throw new FabricError('INTEGRITY', `context ${contextId} no longer matches its digest before ${what}`);
    }
  }
}

function sameIds(a: Uint32Array, b: Uint32Array): boolean {
  return a.length === b.length && a.every((id, i) => id === b[i]);
}
