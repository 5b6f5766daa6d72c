// A reply's token ids, carried in the response itself: its first content part's provider metadata holds
// the ids the model generated it as and the SHA-256 of its text. The AI SDK hands a part's metadata back
// as that part's provider options in the next call's prompt, so the ids live in the workflow's history
// (sealed by the payload codec) and survive what the worker's note may lose: a kill between a call's
// answer and its durable copy. They are used only for the text they were made for: an edited reply, or
// one moved elsewhere in the conversation, goes back as its text.
import { createHash } from 'node:crypto';

import type { LanguageModelV4Content, SharedV4ProviderMetadata } from '@ai-sdk/provider';

import { FabricError } from '../fabric/errors';
import { isTokenIds } from './model-call-note';

const KEY = 'kvfabric';

interface CarriedReply {
  replyIds: number[];
  replyTextSha256: string;
}

/** A part of an assistant message in a prompt, as far as its carried ids go. */
interface PromptPart {
  providerOptions?: Record<string, unknown> | undefined;
}

/** `content` with the reply's ids on its first part. */
export function withReplyIds(content: LanguageModelV4Content[], text: string, ids: Uint32Array): LanguageModelV4Content[] {
  const carried: CarriedReply = { replyIds: Array.from(ids), replyTextSha256: sha256(text) };
  return content.map((part, index) => {
    if (index > 0 || (part.type !== 'text' && part.type !== 'tool-call')) return part;
    const metadata: SharedV4ProviderMetadata = { ...part.providerMetadata, [KEY]: { ...part.providerMetadata?.[KEY], ...carried } };
    return { ...part, providerMetadata: metadata };
  });
}

/**
 * The ids an assistant message carries for `text` (its text as the model writes it); undefined when it
 * carries none or carries them for another text. Ids that are not token ids are INVALID_ARGUMENT.
 */
export function carriedReplyIds(parts: readonly PromptPart[], text: string): Uint32Array | undefined {
  const options = parts[0]?.providerOptions?.[KEY] as Partial<CarriedReply> | undefined;
  if (options?.replyIds === undefined) return undefined;
  const { replyIds, replyTextSha256 } = options;
  if (!isTokenIds(replyIds) || typeof replyTextSha256 !== 'string') {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `an assistant message's providerOptions.${KEY} must hold replyIds (token ids) and replyTextSha256`,
    );
  }
  return replyTextSha256 === sha256(text) ? Uint32Array.from(replyIds) : undefined;
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
