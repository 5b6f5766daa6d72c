// The small records every worker keeps in the tier directory they share: who may touch a context
// (grants), which tokens are revoked (epochs), who holds it after a failover (fences), and which
// allocator id each tenant has. Each is sealed with the workers' keys (record-seal.ts). Grants and tenant
// ids are created once with link(2) and never replaced; epochs and fences only rise, kept as entry names
// (rising-records.ts); every folder is the owner's alone (src/blob-store/posix/private-directory.ts).
export { ContextRecords } from './context-records';
export { EpochStore } from './epochs';
export { GrantStore, type Grant } from './grant-store';
export { HolderFences } from './holder-fences';
export { RecordSeal } from './record-seal';
export { RisingRecords, type RisingValue } from './rising-records';
export { preferredTenantId, TenantRegistry } from './tenant-registry';
