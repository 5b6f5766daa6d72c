// A reply's token ids, carried in the response itself: its first content part's provider metadata holds
// the ids the model generated it as. The AI SDK hands a part's metadata back as that part's provider
// options in the next call's prompt, so the ids live in the workflow's history (sealed by the payload
// codec) and survive what the worker's note may lose: a kill between a call's answer and its durable copy.
//
// Whoever shapes the prompt (the workflow, or whatever it copies into its history) could attach any ids
// to any text, so the ids travel with a MAC: HMAC-SHA256 under a key derived from the workers' master key
// (HKDF, with this use's purpose as its info), over the run, the text and the ids. Every worker of a
// deployment derives the same key, so a run's next call may go to any of them; the MAC names its master
// key, so ids made before a rotation still count while that key is in the ring. Ids are used only for
// the run and the text they were made for: forged ids, an edited reply, or a reply copied into another
// run, go back as their text. (Ids that hold a special token go as their text too: the engine refuses
// them, chat-turn.ts.)
import { createHmac, timingSafeEqual, type KeyObject } from 'node:crypto';

import type { LanguageModelV4Content, SharedV4ProviderMetadata } from '@ai-sdk/provider';

import { FabricError } from '../fabric/errors';
import type { KeyRing } from '../tiers/cold/key-ring';
import { isTokenIds } from './model-call-note';
import type { ModelCallOwner } from './model-call-owner';

const KEY = 'kvfabric';
/** HKDF info of the MAC key: no other use of a master key derives the same key. */
const MAC_KEY_PURPOSE = 'kvfabric.ai-sdk.carried-reply-ids.v1';
const MAC_DOMAIN = 'kvfabric.carried-reply-ids.v1';

interface CarriedReply {
  replyIds: number[];
  /** The master key the MAC's key is derived from. */
  replyKeyId: string;
  /** base64url HMAC-SHA256. */
  replyMac: string;
}

/** A part of an assistant message in a prompt, as far as its carried ids go. */
export interface PromptPart {
  providerOptions?: Record<string, unknown> | undefined;
}

/** Seals reply ids for the run that made them and checks those a prompt carries back. */
export class CarriedReplyIds {
  constructor(private readonly keyRing: KeyRing) {}

  /** `content` with the reply's ids, sealed for `owner`'s run and `text`, on its first part. */
  withReplyIds(owner: ModelCallOwner, content: LanguageModelV4Content[], text: string, ids: Uint32Array): LanguageModelV4Content[] {
    const keyId = this.keyRing.activeKeyId;
    const carried: CarriedReply = {
      replyIds: Array.from(ids),
      replyKeyId: keyId,
      replyMac: this.mac(this.keyRing.derivedKey(keyId, MAC_KEY_PURPOSE)!, owner, text, ids).toString('base64url'),
    };
    return content.map((part, index) => {
      if (index > 0 || (part.type !== 'text' && part.type !== 'tool-call')) return part;
      const metadata: SharedV4ProviderMetadata = { ...part.providerMetadata, [KEY]: { ...part.providerMetadata?.[KEY], ...carried } };
      return { ...part, providerMetadata: metadata };
    });
  }

  /**
   * The ids an assistant message carries for `text` (its text as the model writes it) in `owner`'s run;
   * undefined when it carries none, or none sealed for this run and text by a key of the ring (a reply
   * from before ids were sealed included). Ids that are not token ids are INVALID_ARGUMENT.
   */
  carriedReplyIds(owner: ModelCallOwner, parts: readonly PromptPart[], text: string): Uint32Array | undefined {
    const options = parts[0]?.providerOptions?.[KEY] as Partial<CarriedReply> | undefined;
    if (options?.replyIds === undefined) return undefined;
    const { replyIds, replyKeyId, replyMac } = options;
    if (!isTokenIds(replyIds)) {
      throw new FabricError('INVALID_ARGUMENT', `an assistant message's providerOptions.${KEY}.replyIds must be token ids`);
    }
    if (typeof replyKeyId !== 'string' || typeof replyMac !== 'string') return undefined;
    const key = this.keyRing.derivedKey(replyKeyId, MAC_KEY_PURPOSE);
    if (!key) return undefined;
    const ids = Uint32Array.from(replyIds);
    const given = Buffer.from(replyMac, 'base64url');
    const expected = this.mac(key, owner, text, ids);
    return given.length === expected.length && timingSafeEqual(given, expected) ? ids : undefined;
  }

  /** Over the domain, the run and the text (one JSON array, so no field runs into the next), then the ids. */
  private mac(key: KeyObject, owner: ModelCallOwner, text: string, ids: Uint32Array): Buffer {
    const header = JSON.stringify([MAC_DOMAIN, owner.namespace, owner.workflowId, owner.runId, text]);
    const idBytes = Buffer.alloc(ids.length * 4);
    ids.forEach((id, i) => idBytes.writeUInt32LE(id, i * 4));
    return createHmac('sha256', key).update(header).update(idBytes).digest();
  }
}
