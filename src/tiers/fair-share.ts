// Which contexts eviction takes first: those of tenants holding more than an equal share of the tier,
// least recently used first, then everyone else's in the same order. A tenant that keeps within its share
// loses a context only once no tenant over its share has one left to give.
import type { TenantBlocks, TenantId } from '../fabric/types';

/** Blocks each tenant holds on `tier`, only tenants holding some. */
export function usageOn(tier: 'device' | 'host', all: readonly TenantBlocks[]): Map<TenantId, number> {
  const usage = new Map<TenantId, number>();
  for (const blocks of all) if (blocks[tier] > 0) usage.set(blocks.tenant, blocks[tier]);
  return usage;
}

/**
 * Tenants holding more than `total` divided by the number of tenants: those in `usage`, plus `newcomer`
 * when given (a tenant asking for room it does not hold yet is one of those sharing the tier).
 */
export function tenantsOverFairShare(usage: ReadonlyMap<TenantId, number>, total: number, newcomer?: TenantId): Set<TenantId> {
  const sharing = usage.size + (newcomer === undefined || usage.has(newcomer) ? 0 : 1);
  const fairShare = total / Math.max(sharing, 1);
  const over = new Set<TenantId>();
  for (const [tenant, blocks] of usage) if (blocks > fairShare) over.add(tenant);
  return over;
}

/**
 * Candidates from `walk` (least recently used first; called twice, read lazily) with those of tenants in
 * `over` first, each group in the walk's order. Each candidate comes once.
 */
export function* fairEvictionOrder<E extends { readonly tenant: TenantId }>(
  walk: () => Iterable<E>,
  over: ReadonlySet<TenantId>,
): Generator<E> {
  if (over.size > 0) for (const entry of walk()) if (over.has(entry.tenant)) yield entry;
  for (const entry of walk()) if (!over.has(entry.tenant)) yield entry;
}
