// Public entry of the tiers: TieredMemory over the allocator pool (device and host) and the cold tier.
export { TieredMemory, type TieredMemoryOptions, type TieredStats } from './tiered-memory';
export type { Eviction, MoveReport } from './tier-report';
export * from './cold';
