// The small records every worker keeps in the tier directory they share: who may touch a context
// (grants), which tokens are revoked (epochs), who holds it after a failover (fences), and which
// allocator id each tenant has. One JSON file per record, written atomically (context-records.ts).
export { ContextRecords } from './context-records';
export { EpochStore } from './epochs';
export { GrantStore, type Grant } from './grant-store';
export { HolderFences } from './holder-fences';
export { preferredTenantId, TenantRegistry } from './tenant-registry';
