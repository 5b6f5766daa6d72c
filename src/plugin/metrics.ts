// The worker's own Prometheus metrics, recorded through the Temporal runtime's meter so they are served
// from the same /metrics endpoint as the SDK's (task slots, poll latencies, activity outcomes):
//   kvfabric_pool_blocks{tier,state}        blocks per tier: device and host used/free, disk only-copy/copies
//   kvfabric_contexts                        contexts this worker holds
//   kvfabric_transfer_bytes{direction}       bytes appended and moved between tiers
//   kvfabric_evictions{from,to}              contexts the tier layer demoted on its own under pressure
//   kvfabric_denials{action}                 calls refused for a wrong capability or tenant
//   kvfabric_checkpoints_skipped             turns whose durable copy found the disk full (in memory only)
//   kvfabric_tenant_blocks{tenant,tier}      blocks each tenant holds: tier device, host or pinned
//   kvfabric_quota_refusals{tenant,quota}    calls refused RESOURCE_EXHAUSTED by a tenant quota
//   kvfabric_prefetch{outcome}               planned wake-ups' prefetches: resident, resumed, filled-host, stopped-host, stopped-disk;
//                                            none: an AI SDK run's wake-up that found no KV (docs/ai-sdk.md#planned-wake-ups)
// Tenant labels are names the tenant registry checked (TENANT_NAME: letters, digits, '.', '_', '-'), or
// `id:` and the allocator's id in hex for contexts whose name this worker never looked up.
import type { MetricCounter, MetricGauge, MetricMeter } from '@temporalio/common';

import type { MemoryObserver, NamedTenantBlocks, PrefetchOutcome, TransferDirection } from '../agent-memory/agent-memory';
import type { Tier } from '../fabric/tier';
import type { QuotaName } from '../tiers/tenant-quotas';
import type { TieredStats } from '../tiers/tiered-memory';

const SAMPLE_EVERY_MS = 2000;

export class WorkerMetrics implements MemoryObserver {
  private readonly blocks: MetricGauge;
  private readonly contexts: MetricGauge;
  private readonly transfers: MetricCounter;
  private readonly evictions: MetricCounter;
  private readonly denials: MetricCounter;
  private readonly skippedCheckpoints: MetricCounter;
  private readonly tenantBlockGauge: MetricGauge;
  private readonly quotaRefusals: MetricCounter;
  private readonly prefetches: MetricCounter;
  /** Tenants given a gauge value at the last sample: one gone since is set to 0, not left at its last count. */
  private tenantsSampled = new Set<string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    meter: MetricMeter,
    private readonly stats: () => TieredStats,
    private readonly tenantBlocks: () => NamedTenantBlocks[] = () => [],
  ) {
    this.blocks = meter.createGauge('kvfabric_pool_blocks', 'int', 'blocks', 'KV blocks per tier and state');
    this.contexts = meter.createGauge('kvfabric_contexts', 'int', 'contexts', 'Agent contexts held by this worker');
    this.transfers = meter.createCounter('kvfabric_transfer_bytes', 'bytes', 'KV bytes appended or moved between tiers');
    this.evictions = meter.createCounter('kvfabric_evictions', 'contexts', 'Contexts demoted by the tier layer under memory pressure');
    this.denials = meter.createCounter('kvfabric_denials', 'calls', 'Calls denied for a wrong capability or tenant');
    this.skippedCheckpoints = meter.createCounter('kvfabric_checkpoints_skipped', 'turns', 'Turns whose durable copy found the disk full');
    this.tenantBlockGauge = meter.createGauge(
      'kvfabric_tenant_blocks',
      'int',
      'blocks',
      'KV blocks each tenant holds per tier, and pinned',
    );
    this.quotaRefusals = meter.createCounter('kvfabric_quota_refusals', 'calls', 'Calls refused because a tenant reached a quota');
    this.prefetches = meter.createCounter('kvfabric_prefetch', 'calls', "Planned wake-ups' prefetches, by what they found");
  }

  transferred(direction: TransferDirection, bytes: number): void {
    this.transfers.add(bytes, { direction });
    this.sample();
  }

  denied(action: string): void {
    this.denials.add(1, { action });
  }

  evicted(from: Tier, to: Tier): void {
    this.evictions.add(1, { from, to });
  }

  checkpointSkipped(): void {
    this.skippedCheckpoints.add(1);
  }

  quotaRefused(tenant: string, quota: QuotaName): void {
    this.quotaRefusals.add(1, { tenant, quota });
  }

  prefetched(outcome: PrefetchOutcome | 'none'): void {
    this.prefetches.add(1, { outcome });
  }

  /** Gauges between events too: background demotions change the tiers without a call. */
  start(): void {
    this.sample();
    this.sampleTenants();
    this.timer = setInterval(() => {
      this.sample();
      this.sampleTenants();
    }, SAMPLE_EVERY_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  sample(): void {
    let s: TieredStats;
    try {
      s = this.stats();
    } catch {
      return; // the pool is closed: shutting down
    }
    this.blocks.set(s.usedBlocks, { tier: 'device', state: 'used' });
    this.blocks.set(s.freeBlocks, { tier: 'device', state: 'free' });
    this.blocks.set(s.host.usedBlocks, { tier: 'host', state: 'used' });
    this.blocks.set(s.host.freeBlocks, { tier: 'host', state: 'free' });
    this.blocks.set(s.diskOnlyBlocks, { tier: 'disk', state: 'only-copy' });
    this.blocks.set(s.disk.blockCopies, { tier: 'disk', state: 'copies' });
    this.contexts.set(s.contexts);
  }

  /** Per-tenant gauges: on the timer only, since counting walks the pool's blocks (not on every transfer). */
  sampleTenants(): void {
    const sampled = new Set<string>();
    let all: NamedTenantBlocks[];
    try {
      all = this.tenantBlocks();
    } catch {
      return; // the pool is closed: shutting down
    }
    for (const { tenant, device, host, pinned } of all) {
      this.tenantBlockGauge.set(device, { tenant, tier: 'device' });
      this.tenantBlockGauge.set(host, { tenant, tier: 'host' });
      this.tenantBlockGauge.set(pinned, { tenant, tier: 'pinned' });
      sampled.add(tenant);
    }
    for (const tenant of this.tenantsSampled) {
      if (sampled.has(tenant)) continue;
      for (const tier of ['device', 'host', 'pinned']) this.tenantBlockGauge.set(0, { tenant, tier });
    }
    this.tenantsSampled = sampled;
  }
}
