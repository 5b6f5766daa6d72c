// What a worker keeps beside an engine-built context, as its tier attachment (written with the pages, so
// always of their version): the fingerprint of the engine that made the KV, the token id of every token
// whose KV is stored (an engine cannot continue from KV without them), and the last turn's reply, so a
// turn retried after its worker died answers with what the model said then instead of running again.
import type { TurnReply } from './turn';
import type { EngineFingerprint } from '../engines/fingerprint';
import { FabricError } from '../fabric/errors';
import type { ContextAttachment } from '../tiers/cold';

export interface EngineNote {
  fingerprint: EngineFingerprint;
  /** Token ids, one per stored token. */
  tokens: number[];
  /** The newest turn: where it began (the token count before it) and what the model replied. */
  lastTurn?: { at: number; reply: TurnReply };
}

const MAX_TOKEN_ID = 2 ** 32 - 1;

/**
 * The note of a context holding `heldTokens` tokens; undefined for a context no engine has touched.
 * INTEGRITY for a note that is malformed or out of step with the stored tokens.
 */
export function engineNoteOf(contextId: string, attachment: ContextAttachment | undefined, heldTokens: number): EngineNote | undefined {
  if (attachment === undefined) {
    if (heldTokens === 0) return undefined;
    throw new FabricError(
      'INTEGRITY',
      `context ${contextId} holds ${heldTokens} tokens but no token ids: it was not built by a model engine`,
    );
  }
  const { fingerprint, tokens, lastTurn } = attachment as Partial<EngineNote>;
  const wellFormed =
    typeof fingerprint === 'object' &&
    fingerprint !== null &&
    typeof fingerprint.engine === 'string' &&
    Array.isArray(tokens) &&
    tokens.every((id) => Number.isInteger(id) && id >= 0 && id <= MAX_TOKEN_ID) &&
    (lastTurn === undefined || (Number.isSafeInteger(lastTurn.at) && typeof lastTurn.reply?.reply === 'string'));
  if (!wellFormed) throw new FabricError('INTEGRITY', `context ${contextId}: its token ids are malformed`);
  if (tokens.length !== heldTokens) {
    throw new FabricError('INTEGRITY', `context ${contextId} holds ${heldTokens} tokens of KV but ${tokens.length} token ids`);
  }
  return attachment as unknown as EngineNote;
}
