// Fair eviction against its definition: for any tenants' usage and any order of last use, the candidates
// are every context once, those of tenants over an equal share first, each group in least-recently-used
// order; and a tenant holding no more than an equal share is never among those taken first.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { fairEvictionOrder, tenantsOverFairShare, usageOn } from '../../src/tiers/fair-share';
import { quotaShares } from '../../src/tiers/tenant-quotas';

type Entry = { id: number; tenant: number };

const usage = fc.dictionary(fc.integer({ min: 1, max: 6 }).map(String), fc.integer({ min: 1, max: 100 }), { minKeys: 0, maxKeys: 6 });
const lru = fc.array(fc.integer({ min: 1, max: 7 }), { maxLength: 40 }).map((tenants) => tenants.map((tenant, id) => ({ id, tenant })));

describe('fair eviction order', () => {
  it('takes every context once, over-share tenants first, each group least recently used first', () => {
    fc.assert(
      fc.property(usage, lru, fc.option(fc.integer({ min: 1, max: 7 }), { nil: undefined }), (held, entries: Entry[], newcomer) => {
        const byTenant = new Map(Object.entries(held).map(([tenant, blocks]) => [Number(tenant), blocks]));
        const total = [...byTenant.values()].reduce((a, b) => a + b, 0) + 10;
        const over = tenantsOverFairShare(byTenant, total, newcomer);
        const order = [...fairEvictionOrder(() => entries, over)];

        expect([...order].sort((a, b) => a.id - b.id)).toEqual(entries);
        const firstWithin = order.findIndex((entry) => !over.has(entry.tenant));
        if (firstWithin >= 0) expect(order.slice(firstWithin).every((entry) => !over.has(entry.tenant))).toBe(true);
        const ids = (group: Entry[]) => group.map((entry) => entry.id);
        expect(ids(order.filter((e) => over.has(e.tenant)))).toEqual(ids(entries.filter((e) => over.has(e.tenant))));
        expect(ids(order.filter((e) => !over.has(e.tenant)))).toEqual(ids(entries.filter((e) => !over.has(e.tenant))));

        // Over: strictly more than the tier divided among those sharing it (the newcomer included).
        const sharing = byTenant.size + (newcomer !== undefined && !byTenant.has(newcomer) ? 1 : 0);
        for (const [tenant, blocks] of byTenant) expect(over.has(tenant)).toBe(blocks * sharing > total);
        if (newcomer !== undefined && !byTenant.has(newcomer)) expect(over.has(newcomer)).toBe(false);
      }),
    );
  });

  it('is plain least-recently-used order when no tenant is over its share', () => {
    fc.assert(
      fc.property(lru, (entries: Entry[]) => {
        expect([...fairEvictionOrder(() => entries, new Set())]).toEqual(entries);
      }),
    );
  });

  it('counts only tenants holding blocks on the tier', () => {
    const all = [
      { tenant: 1, device: 3, host: 0, pinned: 0 },
      { tenant: 2, device: 0, host: 5, pinned: 0 },
    ];
    expect(usageOn('device', all)).toEqual(new Map([[1, 3]]));
    expect(usageOn('host', all)).toEqual(new Map([[2, 5]]));
  });
});

describe('tenant quota shares', () => {
  it('fills in the defaults and refuses a share outside (0, 1]', () => {
    expect(quotaShares()).toEqual({ device: 0.75, host: 0.75, pinned: 0.5 });
    expect(quotaShares({ pinned: 0.25 })).toEqual({ device: 0.75, host: 0.75, pinned: 0.25 });
    for (const bad of [0, -0.5, 1.5, Number.NaN]) {
      expect(() => quotaShares({ device: bad })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    }
  });
});
