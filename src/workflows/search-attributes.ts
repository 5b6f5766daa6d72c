// Typed search attributes of agent workflows, so agents can be found and filtered in the Temporal UI
// and by `kvfabric list` (e.g. `KvTenant = "acme" AND KvTier = "disk"`). They must be registered on
// the namespace first: the dev server takes them as flags (src/dev-server), a cluster through the
// operator service (src/client/search-attributes.ts).
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const KvAgentId = defineSearchAttributeKey('KvAgentId', SearchAttributeType.KEYWORD);
export const KvTenant = defineSearchAttributeKey('KvTenant', SearchAttributeType.KEYWORD);
export const KvPhase = defineSearchAttributeKey('KvPhase', SearchAttributeType.KEYWORD);
export const KvTier = defineSearchAttributeKey('KvTier', SearchAttributeType.KEYWORD);
export const KvTokens = defineSearchAttributeKey('KvTokens', SearchAttributeType.INT);
export const KvBlocks = defineSearchAttributeKey('KvBlocks', SearchAttributeType.INT);

/** Name and server-side type of each attribute, for registration. */
export const AGENT_SEARCH_ATTRIBUTES: ReadonlyArray<{ name: string; type: 'Keyword' | 'Int' }> = [
  { name: KvAgentId.name, type: 'Keyword' },
  { name: KvTenant.name, type: 'Keyword' },
  { name: KvPhase.name, type: 'Keyword' },
  { name: KvTier.name, type: 'Keyword' },
  { name: KvTokens.name, type: 'Int' },
  { name: KvBlocks.name, type: 'Int' },
];
