// Per-tenant quotas of one worker's pool: the most device blocks, host blocks and pinned blocks any one
// tenant may hold, each a share of its tier (pinned: of the device tier, which pins starve). Judged by the
// allocator's own count of each tenant's blocks in memory (a block its forks share counts once). A tenant
// that would go over gets RESOURCE_EXHAUSTED naming the quota; other tenants' contexts are never moved to
// make room for it (the eviction policy makes room only from the tenant's own contexts first).
import { FabricError } from '../fabric/errors';
import type { PoolStats, TenantBlocks, TenantId } from '../fabric/types';

export type QuotaName = 'device' | 'host' | 'pinned';

/** Each quota as a fraction in (0, 1] of its tier's blocks on this worker (pinned: of the device tier's). */
export interface TenantQuotaShares {
  device: number;
  host: number;
  pinned: number;
}

/**
 * Device and host: three quarters, so a single tenant still gets most of an idle worker while a quarter
 * stays for everyone else. Pinned: half of the device, since pinned blocks are never evicted: whatever
 * one tenant pins, at least half the device stays evictable for the others.
 */
export const DEFAULT_TENANT_QUOTA_SHARES: Readonly<TenantQuotaShares> = Object.freeze({ device: 0.75, host: 0.75, pinned: 0.5 });

/** What a quota refusal reports to its listeners (metrics): whose, and which quota. */
export interface QuotaRefusal {
  tenant: TenantId;
  quota: QuotaName;
}

/** The shares given, each checked to be in (0, 1], the defaults for those absent; INVALID_ARGUMENT otherwise. */
export function quotaShares(given: Partial<TenantQuotaShares> = {}): TenantQuotaShares {
  const shares = { ...DEFAULT_TENANT_QUOTA_SHARES, ...given };
  for (const quota of ['device', 'host', 'pinned'] as const) {
    const share: unknown = shares[quota];
    if (typeof share !== 'number' || !(share > 0 && share <= 1)) {
      throw new FabricError('INVALID_ARGUMENT', `the tenant ${quota} share must be a number in (0, 1], got ${String(share)}`);
    }
  }
  return shares;
}

export class TenantQuotas {
  readonly shares: TenantQuotaShares;

  constructor(
    private readonly pool: { stats(): PoolStats; tenantBlocks(): TenantBlocks[] },
    shares: Partial<TenantQuotaShares>,
    private readonly onRefusal: (refusal: QuotaRefusal) => void,
  ) {
    this.shares = quotaShares(shares);
  }

  /** The most blocks one tenant may hold under `quota` (at least one). */
  limit(quota: QuotaName, stats: PoolStats = this.pool.stats()): number {
    return Math.max(1, Math.floor(this.shares[quota] * tierTotal(quota, stats)));
  }

  /** By how many blocks the tenant would be over `quota` with `more` blocks (0 or less: within it). */
  excess(tenant: TenantId, quota: QuotaName, more: number): number {
    const stats = this.pool.stats();
    const limit = this.limit(quota, stats);
    // Nobody holds more than the whole tier holds: no per-tenant count is needed below the limit.
    if (inMemory(quota, stats) + more <= limit) return 0;
    return this.held(tenant, quota) + more - limit;
  }

  /** RESOURCE_EXHAUSTED for `more` blocks of context `contextId` over its tenant's `quota`; listeners are told. */
  refusal(contextId: string, tenant: TenantId, quota: QuotaName, more: number): FabricError {
    this.onRefusal({ tenant, quota });
    const stats = this.pool.stats();
    const tier = quota === 'host' ? 'host' : 'device';
    const remedy = quota === 'pinned' ? 'unpin' : 'suspend or release';
    return new FabricError(
      'RESOURCE_EXHAUSTED',
      `context ${contextId}: ${more} more blocks would take its tenant to ${this.held(tenant, quota) + more}, over its ` +
        `${quota}-block quota of ${this.limit(quota, stats)} (tenant ${quota} share ${this.shares[quota]} of ` +
        `${tierTotal(quota, stats)} ${tier} blocks); ${remedy} some of the tenant's own contexts`,
    );
  }

  private held(tenant: TenantId, quota: QuotaName): number {
    return this.pool.tenantBlocks().find((blocks) => blocks.tenant === tenant)?.[quota] ?? 0;
  }
}

function tierTotal(quota: QuotaName, stats: PoolStats): number {
  return quota === 'host' ? stats.host.totalBlocks : stats.totalBlocks;
}

/** Blocks in memory that count toward `quota` for all tenants together: a bound on any one tenant's. */
function inMemory(quota: QuotaName, stats: PoolStats): number {
  if (quota === 'device') return stats.usedBlocks;
  if (quota === 'host') return stats.host.usedBlocks;
  return stats.usedBlocks + stats.host.usedBlocks;
}
