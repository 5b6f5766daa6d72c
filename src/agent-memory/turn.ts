// A turn as the worker runs it: its input (a message for the model, or a synthetic turn's token count),
// how the model writes its reply, and what the turn gives back.
import type { DigestState } from './context-digest';

/** How the model writes its reply; the defaults repeat exactly (greedy). */
export interface TurnGeneration {
  /** Upper bound on reply tokens (default 128). */
  maxTokens?: number;
  /** 0 (default) is greedy; above 0 samples with `seed` (default 0), still repeatable. */
  temperature?: number;
  seed?: number;
}

/** What the model said in a turn. Carried in the update's result (sealed by the codec), never in state. */
export interface TurnReply {
  reply: string;
  promptTokens: number;
  replyTokens: number;
}

/** A message for the worker's model, or a synthetic turn's token count. */
export type TurnInput = { tokens: number } | { message: string; generation?: TurnGeneration };

export interface AppliedTurn {
  digest: DigestState;
  /** The turn was already in the context (an attempt whose worker was lost applied it). */
  alreadyApplied: boolean;
  reply?: TurnReply;
}
