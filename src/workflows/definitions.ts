// What clients and the agent workflow agree on: the workflow's input and carried state, its updates
// and query, and the defaults of its timers and timeouts. Safe to import outside a workflow.
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';

import type { DigestState, GenerationSettings, TurnReply } from '../activities/types';

export type { GenerationSettings, TurnReply } from '../activities/types';
import type { Tier } from '../fabric/tier';
import type { AgentModel } from '../engines/models';
import type { AgentPhase } from './lifecycle';

export type { AgentPhase } from './lifecycle';

export type { AgentModel } from '../engines/models';

export interface AgentTimers {
  /** A resident agent with no turn for this long moves to the host tier (warm). */
  idleToWarmMs: number;
  /** A warm agent stays on the host tier this long, then moves to disk (cold). */
  warmToColdMs: number;
}

export interface AgentTimeouts {
  /**
   * Schedule-to-start of calls on the holder's worker-specific queue: a call waiting longer means that
   * worker is gone, and the workflow restores the context from the cold tier on another worker.
   */
  holderLossMs: number;
  /** Start-to-close of one attempt of a call (transfers included). */
  attemptMs: number;
  /** Heartbeat timeout: a worker that dies mid-transfer is noticed this soon. */
  heartbeatMs: number;
  /** Schedule-to-close: retries of retryable errors (pool exhausted, disk full) give up after this. */
  operationMs: number;
}

/** @experimental `durability`'s values may be renamed (docs/agents.md#glossary-one-word-per-step). */
export interface AgentConfig {
  timers: AgentTimers;
  timeouts: AgentTimeouts;
  /**
   * `every-turn`: each turn also writes the context's durable copy, so losing a worker loses nothing.
   * `on-offload`: only offloads to disk (and a draining worker) write it. The tier layer drops a
   * context's durable copy when the context changes, so an agent whose worker dies between its first turn
   * after a restore and its next offload to disk cannot be recovered.
   */
  durability: 'every-turn' | 'on-offload';
  maxTurnTokens: number;
  /**
   * `tenant` (default): the agent's first turn takes the KV of the longest prompt prefix (whole blocks)
   * that agents of its own tenant hold on the worker, and offers its own; never another tenant's
   * (docs/tiers.md#prefix-sharing). The default because it changes no reply and saves the prefill, and a
   * tenant's agents already share its quota. `none`: the agent prefills all of its prompt itself, so its
   * first turn's time tells nothing of what its co-tenants sent (docs/security.md).
   */
  sharing?: 'tenant' | 'none';
}

export const DEFAULT_AGENT_CONFIG: AgentConfig = {
  timers: { idleToWarmMs: 10 * 60_000, warmToColdMs: 60 * 60_000 },
  // Failover's two detectors (docs/agents.md#failover-timing): 10 s each, so a killed worker's agents
  // resume elsewhere within 15 s. Neither can mistake a busy worker for a lost one: its holder queue takes
  // every call at once (src/plugin/holder-calls.ts) and a taken call heartbeats every second, heard at
  // least every 2 s (src/plugin/liveness.ts), so 10 s means several missed heartbeats, not a slow one.
  timeouts: { holderLossMs: 10_000, attemptMs: 10 * 60_000, heartbeatMs: 10_000, operationMs: 30 * 60_000 },
  durability: 'every-turn',
  maxTurnTokens: 131_072,
  sharing: 'tenant',
};

/** Where an agent's context sits; `none` before allocation and after release. */
export type AgentTier = Tier | 'none';

/** Everything the workflow knows about its agent: counts and digests, never bytes. */
export interface AgentState {
  phase: AgentPhase;
  /** Workflow time (ms) the phase began: the warm timer counts from it. */
  phaseSince: number;
  /** Workflow time (ms) of the last operation: the idle timer counts from it. */
  lastUseAt: number;
  tier: AgentTier;
  tokens: number;
  blocks: number;
  sharedBlocks: number;
  pinned: boolean;
  /** This agent's own turns (a fork starts at 0; its prefix is its parent's). */
  turns: number;
  /** The digest of the context's pages as a worker last reported them. */
  digest: DigestState;
  /**
   * Token ids of the conversation after `digest`: model turns whose KV had not reached the pages when
   * their results came back (a turn's KV follows its reply). Any worker rebuilding the context (after a
   * failover) evaluates them again; usually the last turn's, and empty once the context leaves the engine.
   * Sealed by the payload codec like all state.
   */
  tail: number[];
  /** Worker-specific task queue of the worker holding the context's hot and warm blocks. */
  holder: string | null;
  /** The holder runs agent workflows too, so resumes from memory and hot turns may run locally (HolderCalls.locally). */
  holderRunsWorkflows?: boolean;
  /** Next operation id's sequence number: ids are `${agentId}:${n}`, unique across continue-as-new. */
  nextOperation: number;
  /** Runs of this workflow so far, counting continue-as-new. */
  run: number;
  failovers: number;
  denials: number;
  forks: number;
  lastResume?: ResumeFigures;
  /** How fast this agent's context came back, for a wake-up's lead time (lead-time.ts). */
  restore?: RestoreSpeeds;
  /** A planned wake-up: workflow time (ms) the owner needs the context back by (wake-ups.ts). */
  wakeAt?: number;
  /** The highest durable-copy version any activity reported: a failover refuses an older manifest. */
  durableVersion: number;
  /** The last turn's checkpoint found the disk full: the durable copy lacks it until a later one succeeds. */
  durableCopyStale?: boolean;
  /**
   * The token the workflow acts with on its own (timers, failover) once a `renew` replaced the one it
   * started with (which expires): the replacement's custodian token. Sealed by the payload codec like all state.
   */
  capability?: string;
  /**
   * The context's revocation epoch as this workflow raised it last (its allocation's or a fork's token
   * epoch, then each `renew`'s): every later call presents it, so a worker whose store lost that epoch's
   * entry refuses the call instead of admitting a revoked token (ContextRequest.revokedBelow).
   */
  revokedBelow?: number;
}

/** Bytes handled in a time: one measured speed. */
export interface Throughput {
  bytes: number;
  ms: number;
}

/**
 * A context's measured speeds of coming back: moving its pages from host memory and from disk (each from
 * the last resume that moved bytes from there), and checking and loading the whole context into the engine.
 */
export interface RestoreSpeeds {
  host?: Throughput;
  disk?: Throughput;
  load?: Throughput;
}

/** The last resume's account: bytes moved to the device, from where, and the time to move and verify them. */
export interface ResumeFigures {
  bytes: number;
  transferMs: number;
  verifyMs: number;
  /** Loading it into the holder's model engine, so the next turn is hot (0 without one). */
  engineLoadMs: number;
  from: Tier;
}

export interface AgentInput {
  agentId: string;
  tenant: string;
  /**
   * The token the workflow carries for what it does on its own (allocation, timers, failover): the
   * agent's custodian token (`custody` only: CapabilityIssuer.mintCustodian), never the agent's own,
   * so whoever decodes the history cannot read, turn, fork or release the agent with it. Never logged.
   */
  capability: string;
  model: AgentModel;
  config: AgentConfig;
  /** Set on a fork: the parent's worker already made this context, sharing the parent's blocks. */
  parent?: {
    agentId: string;
    holder: string;
    holderRunsWorkflows?: boolean;
    digest: DigestState;
    tier: Tier;
    blocks: number;
    sharedBlocks: number;
    /** The child context's revocation epoch (ForkResult.childRevokedBelow), which its workflow presents. */
    revokedBelow: number;
  };
  /** Set on continue-as-new: the state to carry on from. */
  carried?: AgentState;
}

/** @experimental Its fields may grow as the workflow reports more. */
export interface AgentStatus {
  agentId: string;
  tenant: string;
  model: string;
  phase: AgentPhase;
  tier: AgentTier;
  tokens: number;
  blocks: number;
  sharedBlocks: number;
  pinned: boolean;
  turns: number;
  /** The context's digest: SHA-256 over its ordered page checksums (agent-memory/context-digest.ts). */
  digest: string;
  holder: string | null;
  parentId?: string;
  run: number;
  failovers: number;
  denials: number;
  forks: number;
  lastResume?: ResumeFigures;
  /** A planned wake-up: when the context is needed, and how long before it the prefetch starts (its lead time). */
  wake?: { at: number; leadMs: number };
  /**
   * Present (true) while the durable copy lags the context: a turn's checkpoint found the disk full. A
   * worker lost meanwhile takes the newest turns with it; a failover then fails typed, never wrong bytes.
   */
  durableCopyStale?: true;
}

/** Updates that touch memory carry the caller's capability: the worker decides, not the workflow. */
export interface Credentials {
  capability: string;
}

/**
 * A turn is either a message to the worker's model (a llama.cpp engine: real KV) or, for the synthetic
 * engine of tests and benchmarks, a count of tokens whose stand-in KV the worker derives. Exactly one.
 */
export interface TurnArgs extends Credentials {
  tokens?: number;
  message?: string;
  generation?: GenerationSettings;
}

/**
 * What a turn tells its caller: the conversation's length after it, the model's reply when the turn was a
 * message, and the warning that the durable copy lags. Only that: a turn's answer is recorded in the
 * agent's history every turn. Where the agent is, its digest and its counters: `status`.
 */
export interface TurnOutcome {
  /** Turns taken, this one included. */
  turns: number;
  /** The context's length in tokens after the turn. */
  tokens: number;
  reply?: TurnReply;
  /** As in AgentStatus: the turn's checkpoint found the disk full. */
  durableCopyStale?: true;
}

/** Messages longer than this are refused before anything runs (a model's context is far shorter). */
export const MAX_MESSAGE_CHARS = 64 * 1024;
export const MAX_REPLY_TOKENS = 4096;

export interface SuspendArgs extends Credentials {
  tier: 'host' | 'disk';
}

export interface ForkArgs extends Credentials {
  childId: string;
  /** The child's own capability, minted by the caller. */
  childCapability: string;
  /** Its custodian token, minted with it: the child's workflow carries this one. */
  childCustodian: string;
}

export interface RenewArgs extends Credentials {
  /** The replacement, minted by the control plane: same agent, context and workflow, no more rights. */
  next: string;
  /** The replacement's custodian token: the workflow carries it from now on. */
  nextCustodian: string;
}

export interface ForkOutcome {
  childId: string;
  workflowId: string;
  child: AgentStatus;
}

export const turnUpdate = defineUpdate<TurnOutcome, [TurnArgs]>('turn');
export const suspendUpdate = defineUpdate<AgentStatus, [SuspendArgs]>('suspend');
export const resumeUpdate = defineUpdate<AgentStatus, [Credentials]>('resume');
export const forkUpdate = defineUpdate<ForkOutcome, [ForkArgs]>('fork');
export const pinUpdate = defineUpdate<AgentStatus, [Credentials]>('pin');
export const unpinUpdate = defineUpdate<AgentStatus, [Credentials]>('unpin');
export const releaseUpdate = defineUpdate<AgentStatus, [Credentials]>('release');
export const renewUpdate = defineUpdate<AgentStatus, [RenewArgs]>('renew');
export const statusQuery = defineQuery<AgentStatus>('status');

/**
 * A GPU worker that stopped gracefully tells each agent whose context it drained to disk that it left
 * (src/plugin/handover.ts): the workflow then takes that holder for gone at once (holder-left.ts).
 */
export interface HolderLeftArgs {
  /** The worker-specific queue of the holder that left. */
  holder: string;
  /** custodyProof of the custodian token the agent's workflow carries: only its custodian knows it. */
  proof: string;
}

export const holderLeftUpdate = defineUpdate<AgentStatus, [HolderLeftArgs]>('holderLeft');

/**
 * A planned wake-up (src/workflows/wake-ups.ts): the context is needed back at `at` (workflow time, ms
 * since the epoch; null cancels the one planned). Only the owner may plan one: `proof` is custodyProof of
 * the custodian token the agent's workflow carries, which the workflow that started the agent holds.
 */
export interface WakeArgs {
  at: number | null;
  proof: string;
}

export const wakeUpdate = defineUpdate<AgentStatus, [WakeArgs]>('wake');
/** The same, for workflow code, which can signal another workflow but not update it (sleepThenWake). */
export const wakeSignal = defineSignal<[WakeArgs]>('wake');

/**
 * What a worker shows to say it is the agent's custodian without carrying the token: the token's
 * signature part, known only to those the token was shown to (its workflow shows it to each worker that
 * holds the context) and no token itself, so no worker admits it and the history that records it holds
 * no credential.
 */
export function custodyProof(custodianToken: string): string {
  return custodianToken.slice(custodianToken.lastIndexOf('.') + 1);
}

export const AGENT_WORKFLOW_TYPE = 'agentWorkflow';
/** The agent workflow's signature (agent.ts), for starting it by type name without importing it. */
export type AgentWorkflow = (input: AgentInput) => Promise<AgentStatus>;
