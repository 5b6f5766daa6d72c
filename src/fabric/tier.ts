// The one name for where a context's or a page's bytes are: a device frame, a host frame, or only the
// disk copy. Deeper tiers are slower to come back from.
export type Tier = 'device' | 'host' | 'disk';

/** 0 for the device, growing with distance from it. */
export const TIER_DEPTH: Readonly<Record<Tier, number>> = { device: 0, host: 1, disk: 2 };

/** Whether `a` is further from the device than `b`. */
export function isDeeper(a: Tier, b: Tier): boolean {
  return TIER_DEPTH[a] > TIER_DEPTH[b];
}
