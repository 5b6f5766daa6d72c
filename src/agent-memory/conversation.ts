// A model context's token ids as one list: those whose KV the pages hold (the engine note beside them)
// and, after them, the tail the workflow recorded (turns whose KV had not reached the pages when their
// results came back). The two must agree where they overlap: the pages may have caught up with part of
// the tail (its write-behind finished), never with something else.
import { FabricError } from '../fabric/errors';
import type { DigestState } from './context-digest';
import type { EngineNote } from './engine-note';

export interface Conversation {
  /** Every token id, the pages' first. */
  tokens: Uint32Array;
  /** How many of them have KV in the pages. */
  stored: number;
}

/**
 * The conversation of a context whose pages hold `note`'s tokens, as the workflow records it: pages it
 * verified (`before`) and the tail after them. INTEGRITY when the pages hold fewer tokens than recorded,
 * or tokens other than the tail's; pages holding more than the whole conversation are the caller's to
 * judge (a turn applied whose result never came back), and count here only up to the conversation's end.
 */
export function conversationOf(
  contextId: string,
  note: EngineNote | undefined,
  before: DigestState,
  tail: readonly number[],
): Conversation {
  const held = note?.tokens ?? [];
  if (held.length < before.tokens) {
    throw new FabricError('INTEGRITY', `context ${contextId} holds ${held.length} tokens; the workflow recorded ${before.tokens}`);
  }
  const total = before.tokens + tail.length;
  const overlap = Math.min(held.length, total) - before.tokens;
  for (let i = 0; i < overlap; i++) {
    if (held[before.tokens + i] !== tail[i]) {
      throw new FabricError('INTEGRITY', `context ${contextId}: its pages hold other tokens than the turns its workflow recorded`);
    }
  }
  const tokens = new Uint32Array(total);
  tokens.set(held.slice(0, Math.min(held.length, total)));
  if (held.length < total) tokens.set(tail.slice(held.length - before.tokens), held.length);
  return { tokens, stored: Math.min(held.length, total) };
}
