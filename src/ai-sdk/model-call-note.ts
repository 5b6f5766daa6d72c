// What a worker keeps beside an AI SDK agent's pages, as their tier attachment (written with them, so
// always of their version): the run that owns them (so any worker can tell, from the cold tier alone,
// when it has ended and its KV must go), the engine's fingerprint, the token id of every stored token,
// and the model's recent replies as generated (their text and token ids), so a reply the next call
// sends back continues the KV it was generated with.
import type { EngineFingerprint } from '../engines/fingerprint';
import { FabricError } from '../fabric/errors';
import type { ContextAttachment } from '../tiers/cold';
import type { ModelCallOwner } from './model-call-owner';

export interface ModelCallNote {
  owner: ModelCallOwner;
  fingerprint: EngineFingerprint;
  /** Token ids, one per stored token. */
  tokens: number[];
  /** The newest replies, oldest first. */
  replies: Array<{ text: string; ids: number[] }>;
}

/** Replies remembered: a tool loop sends back each reply once, in the very next call. */
export const REMEMBERED_REPLIES = 16;
const MAX_TOKEN_ID = 2 ** 32 - 1;

const isOwner = (owner: unknown): owner is ModelCallOwner =>
  typeof owner === 'object' &&
  owner !== null &&
  (['namespace', 'workflowId', 'runId', 'tenant'] as const).every((field) => typeof (owner as Record<string, unknown>)[field] === 'string');

/** Whether `ids` is an array of token ids (unsigned 32-bit integers). */
export const isTokenIds = (ids: unknown): ids is number[] =>
  Array.isArray(ids) && ids.every((id) => Number.isInteger(id) && id >= 0 && id <= MAX_TOKEN_ID);

/** The note of a context holding `heldTokens`; undefined for one no call has filled. INTEGRITY when malformed. */
export function modelCallNoteOf(
  contextId: string,
  attachment: ContextAttachment | undefined,
  heldTokens: number,
): ModelCallNote | undefined {
  if (attachment === undefined) {
    if (heldTokens === 0) return undefined;
    throw new FabricError('INTEGRITY', `context ${contextId} holds ${heldTokens} tokens but no token ids`);
  }
  const { owner, fingerprint, tokens, replies } = attachment as Partial<ModelCallNote>;
  const wellFormed =
    isOwner(owner) &&
    typeof fingerprint === 'object' &&
    fingerprint !== null &&
    typeof fingerprint.engine === 'string' &&
    isTokenIds(tokens) &&
    Array.isArray(replies) &&
    replies.every((reply) => typeof reply?.text === 'string' && isTokenIds(reply.ids));
  if (!wellFormed) throw new FabricError('INTEGRITY', `context ${contextId}: its note is malformed`);
  if (tokens.length !== heldTokens) {
    throw new FabricError('INTEGRITY', `context ${contextId} holds ${heldTokens} tokens of KV but ${tokens.length} token ids`);
  }
  return attachment as unknown as ModelCallNote;
}

/** The owner a context's note names, when it is a well-formed AI SDK note; undefined otherwise. */
export function ownerInNote(attachment: ContextAttachment | undefined): ModelCallOwner | undefined {
  const owner = (attachment as Partial<ModelCallNote> | undefined)?.owner;
  return isOwner(owner) ? owner : undefined;
}

/**
 * The lookup a call's rendering asks for a reply's token ids by its text, over remembered `replies`, in
 * conversation order: two replies that read the same (a tool called twice alike) may have been generated
 * as different ids, and each message gets its own.
 */
export function replyIdsIn(replies: ModelCallNote['replies']): (text: string) => Uint32Array | undefined {
  let next = 0;
  return (text) => {
    for (let i = next; i < replies.length; i++) {
      if (replies[i]!.text !== text) continue;
      next = i + 1;
      return Uint32Array.from(replies[i]!.ids);
    }
    return undefined;
  };
}
