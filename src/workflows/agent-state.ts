// The agent's state as others see it: the initial state of a new agent or fork, the status the query
// returns, and the memo and search attributes a workflow starts with. Shared by the workflow and the
// client (which sets the same memo and attributes when it starts an agent).
import type { SearchAttributePair } from '@temporalio/common';

import type { AgentInput, AgentState, AgentStatus } from './definitions';
import { leadTimeMs } from './lead-time';
import { KvAgentId, KvBlocks, KvPhase, KvTenant, KvTier, KvTokens } from './search-attributes';

export function initialState(input: AgentInput): AgentState {
  const now = Date.now();
  const parent = input.parent;
  return {
    phase: 'created',
    phaseSince: now,
    lastUseAt: now,
    tier: parent?.tier ?? 'none',
    tokens: parent?.digest.tokens ?? 0,
    blocks: parent?.blocks ?? 0,
    sharedBlocks: parent?.sharedBlocks ?? 0,
    pinned: false,
    turns: 0,
    // Replaced by the allocation's digest before any turn; a fork starts from its parent's.
    digest: parent?.digest ?? { value: '', tokens: 0 },
    // A fork's pages hold its parent's whole conversation: the parent's worker saved the tail first.
    tail: [],
    holder: parent?.holder ?? null,
    ...(parent?.holderRunsWorkflows ? { holderRunsWorkflows: true } : {}),
    nextOperation: 0,
    durableVersion: 0,
    run: 1,
    failovers: 0,
    denials: 0,
    forks: 0,
    ...(parent ? { revokedBelow: parent.revokedBelow } : {}),
  };
}

export function statusOf(input: AgentInput, state: AgentState): AgentStatus {
  return {
    agentId: input.agentId,
    tenant: input.tenant,
    model: input.model.name,
    phase: state.phase,
    tier: state.tier,
    tokens: state.tokens,
    blocks: state.blocks,
    sharedBlocks: state.sharedBlocks,
    pinned: state.pinned,
    turns: state.turns,
    digest: state.digest.value,
    holder: state.holder,
    ...(input.parent ? { parentId: input.parent.agentId } : {}),
    run: state.run,
    failovers: state.failovers,
    denials: state.denials,
    forks: state.forks,
    ...(state.lastResume ? { lastResume: state.lastResume } : {}),
    ...(state.wakeAt === undefined ? {} : { wake: { at: state.wakeAt, leadMs: leadTimeMs(input, state) } }),
    ...(state.durableCopyStale ? { durableCopyStale: true as const } : {}),
  };
}

/** The memo: what the agent is, for people reading the UI. Fixed for the agent's life. */
export function memoOf(input: AgentInput): Record<string, unknown> {
  return {
    model: input.model.name,
    shape: input.model.shape,
    tokensPerBlock: input.model.tokensPerBlock,
    tenant: input.tenant,
    ...(input.parent ? { parentId: input.parent.agentId } : {}),
  };
}

export function searchAttributesOf(input: AgentInput, state: AgentState): SearchAttributePair[] {
  return [
    { key: KvAgentId, value: input.agentId },
    { key: KvTenant, value: input.tenant },
    { key: KvPhase, value: state.phase },
    { key: KvTier, value: state.tier },
    { key: KvTokens, value: state.tokens },
    { key: KvBlocks, value: state.blocks },
  ];
}
