// The worker's per-tenant metrics: kvfabric_tenant_blocks{tenant,tier} from the allocator's counts on the
// sampling timer (a tenant gone since is set to 0, not left at its last count), and
// kvfabric_quota_refusals{tenant,quota} per refusal. A meter that records what it is given stands in for
// the Temporal runtime's (which serves the same values over HTTP: test/temporal/agent-lifecycle.test.ts).
import type { MetricCounter, MetricGauge, MetricHistogram, MetricMeter, MetricTags } from '@temporalio/common';
import { afterEach, describe, expect, it } from 'vitest';

import type { NamedTenantBlocks } from '../../src/agent-memory/agent-memory';
import { MODELS } from '../../src/engines/models';
import { NativeAllocator } from '../../src/fabric/native-allocator';
import { WorkerMetrics } from '../../src/plugin/metrics';
import { TieredMemory } from '../../src/tiers/tiered-memory';

/** The last value each metric got per tag set, as `name{k=v,...}`. */
class RecordingMeter implements MetricMeter {
  readonly values = new Map<string, number>();

  createCounter(name: string): MetricCounter {
    const counter: MetricCounter = {
      name,
      kind: 'counter',
      valueType: 'int',
      add: (value, tags) => this.put(name, tags, (this.values.get(key(name, tags)) ?? 0) + value),
      withTags: () => counter,
    };
    return counter;
  }

  createGauge(name: string): MetricGauge {
    const gauge: MetricGauge = {
      name,
      kind: 'gauge',
      valueType: 'int',
      set: (value, tags) => this.put(name, tags, value),
      withTags: () => gauge,
    };
    return gauge;
  }

  createHistogram(name: string): MetricHistogram {
    const histogram: MetricHistogram = { name, kind: 'histogram', valueType: 'int', record: () => undefined, withTags: () => histogram };
    return histogram;
  }

  withTags(): MetricMeter {
    return this;
  }

  private put(name: string, tags: MetricTags | undefined, value: number): void {
    this.values.set(key(name, tags), value);
  }
}

function key(name: string, tags: MetricTags = {}): string {
  return `${name}{${Object.entries(tags)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(',')}}`;
}

const closers: Array<() => void> = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

describe('per-tenant metrics', () => {
  it('gauges each tenant per tier and pinned, zeroes a tenant gone since, and counts refusals by quota', () => {
    const pool = new NativeAllocator({ shape: MODELS.tiny!.shape, blockCount: 8, hostBlockCount: 8 });
    closers.push(() => pool.close());
    const tiers = new TieredMemory({ pool });
    const meter = new RecordingMeter();
    let tenants: NamedTenantBlocks[] = [{ tenant: 'acme', device: 3, host: 1, pinned: 2 }];
    const metrics = new WorkerMetrics(
      meter,
      () => tiers.stats(),
      () => tenants,
    );
    metrics.start();
    metrics.stop();
    expect(meter.values.get('kvfabric_tenant_blocks{tenant=acme,tier=device}')).toBe(3);
    expect(meter.values.get('kvfabric_tenant_blocks{tenant=acme,tier=host}')).toBe(1);
    expect(meter.values.get('kvfabric_tenant_blocks{tenant=acme,tier=pinned}')).toBe(2);

    tenants = [{ tenant: 'globex', device: 1, host: 0, pinned: 0 }];
    metrics.sampleTenants();
    expect(meter.values.get('kvfabric_tenant_blocks{tenant=acme,tier=device}')).toBe(0);
    expect(meter.values.get('kvfabric_tenant_blocks{tenant=acme,tier=pinned}')).toBe(0);
    expect(meter.values.get('kvfabric_tenant_blocks{tenant=globex,tier=device}')).toBe(1);

    metrics.quotaRefused('acme', 'pinned');
    metrics.quotaRefused('acme', 'pinned');
    metrics.quotaRefused('acme', 'device');
    expect(meter.values.get('kvfabric_quota_refusals{tenant=acme,quota=pinned}')).toBe(2);
    expect(meter.values.get('kvfabric_quota_refusals{tenant=acme,quota=device}')).toBe(1);
  });
});
