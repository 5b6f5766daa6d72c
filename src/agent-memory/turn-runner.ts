// Runs an agent's turn on a context this worker holds: a message through the worker's model engine, or a
// synthetic turn's stand-in KV (a token count, on a worker with no model). Either way the turn's KV is
// appended unless the context already ends with it (an attempt on a lost worker applied it before its
// durable copy was written), and the digest after the turn is computed over the pages.
import type { Engine } from '../engines/engine';
import { syntheticKv } from '../engines/synthetic/synthetic-kv';
import { FabricError } from '../fabric/errors';
import type { ContextAttachment } from '../tiers/cold';
import type { TieredMemory } from '../tiers/tiered-memory';
import type { DigestState } from './context-digest';
import type { ContextVerifier } from './context-verifier';
import { engineNoteOf, type EngineNote } from './engine-note';
import type { AppliedTurn, TurnInput, TurnReply } from './turn';

type TurnTiers = Pick<TieredMemory, 'append' | 'attachment' | 'contextStats' | 'read'>;

export class TurnRunner {
  constructor(
    private readonly tiers: TurnTiers,
    private readonly verifier: ContextVerifier,
    private readonly bytesPerToken: number,
    /** The model behind message turns; absent on a worker of the synthetic engine (token-count turns). */
    private readonly engine: Engine | undefined,
    /** Told the bytes each turn appended. */
    private readonly appended: (bytes: number) => void,
  ) {}

  /** Applies turn `turn` to a context whose digest before it the workflow recorded as `before`. */
  run(contextId: string, turn: number, input: TurnInput, before: DigestState): Promise<AppliedTurn> {
    return 'tokens' in input ? this.synthetic(contextId, turn, input.tokens, before) : this.modelTurn(contextId, input, before);
  }

  private async synthetic(contextId: string, turn: number, tokens: number, before: DigestState): Promise<AppliedTurn> {
    if (this.engine)
      throw new FabricError(
        'INVALID_ARGUMENT',
        `this worker runs ${this.engine.fingerprint.engine}: a turn takes a message, not a token count`,
      );
    const kv = syntheticKv(contextId, turn, tokens, this.bytesPerToken);
    const held = this.tiers.contextStats(contextId).tokens;
    let alreadyApplied = false;
    if (held === before.tokens) {
      await this.tiers.append(contextId, kv);
      this.appended(kv.byteLength);
    } else if (held === before.tokens + tokens) {
      alreadyApplied = true;
    } else {
      throw new FabricError('INTEGRITY', `context ${contextId} holds ${held} tokens; the workflow expected ${before.tokens}`);
    }
    const digest = await this.digestAfter(contextId, before, tokens, `turn ${turn}`);
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
  private async modelTurn(contextId: string, input: Exclude<TurnInput, { tokens: number }>, before: DigestState): Promise<AppliedTurn> {
    const engine = this.engine;
    if (!engine) throw new FabricError('INVALID_ARGUMENT', 'this worker runs no model (synthetic engine): a turn takes a token count');
    const held = this.tiers.contextStats(contextId).tokens;
    const note = engineNoteOf(contextId, this.tiers.attachment(contextId), held);
    if (held > before.tokens && note?.lastTurn?.at === before.tokens) {
      // Applied by an attempt whose worker was lost: the reply it gave comes from the note.
      const digest = await this.digestAfter(contextId, before, held - before.tokens, 'its last turn');
      return { digest, alreadyApplied: true, reply: note.lastTurn.reply };
    }
    if (held !== before.tokens)
      throw new FabricError('INTEGRITY', `context ${contextId} holds ${held} tokens; the workflow expected ${before.tokens}`);
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
    const next: EngineNote = {
      fingerprint: engine.fingerprint,
      tokens: [...(note?.tokens ?? []), ...result.appended.tokens],
      lastTurn: { at: held, reply },
    };
    try {
      await this.tiers.append(contextId, result.appended.kv, next as unknown as ContextAttachment);
    } catch (err) {
      await engine.release(contextId); // its hot copy is ahead of the stored context now
      throw err;
    }
    this.appended(result.appended.kv.byteLength);
    const digest = await this.digestAfter(contextId, before, result.appended.tokens.length, 'this turn');
    return { digest, alreadyApplied: false, reply };
  }

  /**
   * The digest after `added` tokens past `before`; INTEGRITY if the context no longer starts as the
   * workflow recorded before the turn.
   */
  private async digestAfter(contextId: string, before: DigestState, added: number, turn: string): Promise<DigestState> {
    if (!(await this.verifier.matches(contextId, before))) {
      throw new FabricError('INTEGRITY', `context ${contextId} no longer matches its digest before ${turn}`);
    }
    return this.verifier.digestAt(contextId, before.tokens + added);
  }
}
