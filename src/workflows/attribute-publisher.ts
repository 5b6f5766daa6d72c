// Inside an agent workflow: keeps the agent's search attributes (phase, tier, tokens, blocks) in step with
// its state, upserting only those that changed, since every upsert is a history event.
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

  publish(state: Pick<AgentState, 'phase' | 'tier' | 'tokens' | 'blocks'>): void {
    const now = { phase: state.phase, tier: state.tier, tokens: state.tokens, blocks: state.blocks };
    const changes: SearchAttributeUpdatePair[] = [];
    if (now.phase !== this.published.phase) changes.push({ key: KvPhase, value: now.phase });
    if (now.tier !== this.published.tier) changes.push({ key: KvTier, value: now.tier });
    if (now.tokens !== this.published.tokens) changes.push({ key: KvTokens, value: now.tokens });
    if (now.blocks !== this.published.blocks) changes.push({ key: KvBlocks, value: now.blocks });
    if (changes.length > 0) upsertSearchAttributes(changes);
    this.published = now;
  }
}
