// Inside an agent workflow: keeps the agent's search attributes (phase, tier, tokens, blocks) in step with
// its state. Every upsert is a history event, so they are published when the agent moves (its phase or
// its tier changes: the first turn, a suspend, a timer, a resume, a failover, the release), with the size
// as of that move, and not on a hot turn, which grows the context but moves nothing: a busy agent would
// otherwise add an event to every turn. A listing's KvTokens and KvBlocks are thus the size at the agent's
// last move, which is what choosing agents to offload or inspect reads; the status query has the exact
// size at any time.
import type { SearchAttributeUpdatePair } from '@temporalio/common';
import { upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';

import type { AgentState } from './definitions';
import { KvBlocks, KvPhase, KvTier, KvTokens } from './search-attributes';

type Published = { phase?: string; tier?: string; tokens?: number; blocks?: number };

export class AttributePublisher {
  /** What the run started with: the client's start, the fork, or the run before continue-as-new set them. */
  private published: Published;

  constructor() {
    const attributes = workflowInfo().typedSearchAttributes;
    this.published = {
      phase: attributes.get(KvPhase),
      tier: attributes.get(KvTier),
      tokens: attributes.get(KvTokens),
      blocks: attributes.get(KvBlocks),
    };
  }

  /** Upserts the attributes that changed, once the phase or the tier did; otherwise nothing. */
  publish(state: Pick<AgentState, 'phase' | 'tier' | 'tokens' | 'blocks'>): void {
    if (state.phase === this.published.phase && state.tier === this.published.tier) return;
    const now = { phase: state.phase, tier: state.tier, tokens: state.tokens, blocks: state.blocks };
    const changes: SearchAttributeUpdatePair[] = [];
    if (now.phase !== this.published.phase) changes.push({ key: KvPhase, value: now.phase });
    if (now.tier !== this.published.tier) changes.push({ key: KvTier, value: now.tier });
    if (now.tokens !== this.published.tokens) changes.push({ key: KvTokens, value: now.tokens });
    if (now.blocks !== this.published.blocks) changes.push({ key: KvBlocks, value: now.blocks });
    upsertSearchAttributes(changes);
    this.published = now;
  }
}
