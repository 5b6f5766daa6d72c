// A turn as the worker runs it: what its caller asks for (a message for the model, or a synthetic turn's
// token count), the input it becomes once checked, and what the turn gives back.
import type { GenerationSettings } from '../engines/engine';
import { FabricError } from '../fabric/errors';
import type { DigestState } from './context-digest';

/** What the model said in a turn. Carried in the update's result (sealed by the codec), never in state. */
export interface TurnReply {
  reply: string;
  promptTokens: number;
  replyTokens: number;
}

/**
 * A turn's own fields, as its caller asks for it: what a turn request carries beside the call's common
 * fields (the context, tenant, capability and operation id).
 */
export interface TurnFields {
  /** The agent's own turn number: with the agent id, it determines a synthetic turn's KV bytes. */
  turn: number;
  /** Exactly one of `tokens` (a synthetic turn) and `message` (a turn through the worker's model). */
  tokens?: number;
  message?: string;
  generation?: GenerationSettings;
  /** The context's digest before this turn (the workflow's record of its pages). */
  before: DigestState;
  /**
   * Token ids the conversation holds after `before` (the workflow's record of them): turns whose KV was
   * not yet in the pages when their results came back. A worker rebuilding the context (after a failover,
   * or an engine that let go of it) evaluates them again.
   */
  tail?: number[];
  /** Write the durable copy after appending. */
  checkpoint: boolean;
  /** A first model turn may take a prefix its tenant's agents hold on the worker (AgentConfig.sharing; default 'tenant'). */
  sharing?: 'tenant' | 'none';
}

/** A message for the worker's model, or a synthetic turn's token count. */
export type TurnInput = { tokens: number } | { message: string; generation?: GenerationSettings };

export interface AppliedTurn {
  /** The digest of the pages as the turn found them (a model turn's own KV follows them write-behind). */
  digest: DigestState;
  /** Model turns: the token ids the turn added, which the workflow keeps until the pages have their KV. */
  added?: number[];
  /** The turn was already in the context (an attempt whose worker was lost applied it). */
  alreadyApplied: boolean;
  reply?: TurnReply;
}

/** A message or a token count, exactly one: the workflow checks it, a raw caller may not have. */
export function turnInputOf(ask: Pick<TurnFields, 'tokens' | 'message' | 'generation'>): TurnInput {
  const { tokens, message, generation } = ask;
  if (typeof message === 'string' && tokens === undefined) return { message, ...(generation ? { generation } : {}) };
  if (Number.isSafeInteger(tokens) && (tokens as number) >= 1 && message === undefined) return { tokens: tokens as number };
  throw new FabricError('INVALID_ARGUMENT', 'a turn takes either a message or a positive token count');
}
