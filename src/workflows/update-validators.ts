// The checks each update's validator runs before anything is written to history: a refused update leaves
// no event. Pure functions of the arguments and the agent's state, so they are tested on their own.
import { isAgentId } from '../identity/agent-identity';
import type {
  AgentConfig,
  AgentState,
  Credentials,
  ForkArgs,
  GenerationSettings,
  RenewArgs,
  SuspendArgs,
  TurnArgs,
  WakeArgs,
} from './definitions';
import { MAX_MESSAGE_CHARS, MAX_REPLY_TOKENS, custodyProof } from './definitions';
import { refusal } from './failures';

/** Every update: the agent is not released, and the caller presents a capability. */
export function checkCredentials(args: Credentials, state: AgentState, agentId: string): void {
  if (state.phase === 'released') throw refusal('INVALID_STATE', `agent ${agentId} is released`);
  if (typeof args !== 'object' || args === null || typeof args.capability !== 'string' || args.capability.length === 0) {
    throw refusal('INVALID_ARGUMENT', 'a capability is required');
  }
}

export function checkTurn({ tokens, message, generation }: TurnArgs, config: AgentConfig): void {
  if ((tokens === undefined) === (message === undefined)) throw refusal('INVALID_ARGUMENT', 'a turn takes either a message or tokens');
  if (tokens !== undefined && (!Number.isSafeInteger(tokens) || tokens < 1 || tokens > config.maxTurnTokens)) {
    throw refusal('INVALID_ARGUMENT', `tokens must be an integer in [1, ${config.maxTurnTokens}]`);
  }
  if (message !== undefined && (typeof message !== 'string' || message.length === 0 || message.length > MAX_MESSAGE_CHARS)) {
    throw refusal('INVALID_ARGUMENT', `message must be a string of 1 to ${MAX_MESSAGE_CHARS} characters`);
  }
  if (generation !== undefined) checkGeneration(generation);
}

function checkGeneration(generation: GenerationSettings): void {
  if (typeof generation !== 'object' || generation === null) throw refusal('INVALID_ARGUMENT', 'generation must be an object');
  const { maxTokens, temperature, seed } = generation;
  if (maxTokens !== undefined && (!Number.isSafeInteger(maxTokens) || maxTokens < 1 || maxTokens > MAX_REPLY_TOKENS)) {
    throw refusal('INVALID_ARGUMENT', `generation.maxTokens must be an integer in [1, ${MAX_REPLY_TOKENS}]`);
  }
  if (temperature !== undefined && !(typeof temperature === 'number' && temperature >= 0 && temperature <= 2)) {
    throw refusal('INVALID_ARGUMENT', 'generation.temperature must be a number in [0, 2]');
  }
  if (seed !== undefined && (!Number.isSafeInteger(seed) || seed < 0))
    throw refusal('INVALID_ARGUMENT', 'generation.seed must be an integer >= 0');
}

export function checkSuspend({ tier }: SuspendArgs, state: AgentState, agentId: string): void {
  if (tier !== 'host' && tier !== 'disk') throw refusal('INVALID_ARGUMENT', "tier must be 'host' or 'disk'");
  if (state.pinned) throw refusal('INVALID_STATE', `agent ${agentId} is pinned: unpin it first`);
}

export function checkRenew({ next, nextCustodian }: RenewArgs): void {
  if (typeof next !== 'string' || next.length === 0) throw refusal('INVALID_ARGUMENT', 'a replacement capability is required');
  if (typeof nextCustodian !== 'string' || nextCustodian.length === 0)
    throw refusal('INVALID_ARGUMENT', "the replacement's custodian token is required");
}

export function checkFork({ childId, childCapability, childCustodian }: ForkArgs, agentId: string): void {
  if (!isAgentId(childId) || childId === agentId) {
    throw refusal('INVALID_ARGUMENT', 'childId must be 1 to 128 letters, digits, ".", "_", ":" or "-", and not the parent');
  }
  if (typeof childCapability !== 'string' || childCapability.length === 0)
    throw refusal('INVALID_ARGUMENT', 'a child capability is required');
  if (typeof childCustodian !== 'string' || childCustodian.length === 0)
    throw refusal('INVALID_ARGUMENT', "the child's custodian token is required");
}

/**
 * The operations only the agent's custodian may ask for (holderLeft, wake): `proof` must be custodyProof of
 * the custodian token the workflow carries (`custodian`), a caller's token or another agent's is refused.
 */
export function checkCustodyProof(proof: unknown, custodian: string, operation: string): void {
  if (typeof proof !== 'string' || proof.length === 0 || proof !== custodyProof(custodian))
    throw refusal(
      'PERMISSION_DENIED',
      `${operation} is the agent's custodian's to send: the proof of its custodian token is missing or wrong`,
    );
}

/** How far ahead a wake-up may be planned: a year (a Temporal timer takes far longer, a plan this far is a mistake). */
export const MAX_WAKE_AHEAD_MS = 365 * 24 * 60 * 60_000;

/** A wake-up's instant: null (cancel) or workflow time in ms, at most MAX_WAKE_AHEAD_MS from `now`. */
export function checkWake({ at }: WakeArgs, now: number): void {
  if (at === null) return;
  if (!Number.isSafeInteger(at) || at < 0 || at > now + MAX_WAKE_AHEAD_MS)
    throw refusal('INVALID_ARGUMENT', 'at must be null or a time in ms since the epoch, at most a year ahead');
}
