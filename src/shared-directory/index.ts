// The small records every worker keeps in the store they share (the tier directory or a bucket, through
// the blob store seam): who may touch a context (grants), which tokens are revoked (epochs), who holds it
// after a failover (fences), and which allocator id each tenant has. Each is sealed with the workers'
// keys (record-seal.ts) and bound to its key. Grants and tenant ids are created once (If-None-Match: *)
// and never replaced; epochs and fences only rise, one create-once key per value (rising-records.ts); on
// a POSIX store every folder is the owner's alone (record-prefix.ts).
export { ContextRecords } from './context-records';
export { EpochStore } from './epochs';
export { GrantStore, type Grant } from './grant-store';
export { HolderFences } from './holder-fences';
export { RecordSeal } from './record-seal';
export { RisingRecords, type RisingValue } from './rising-records';
export { preferredTenantId, TenantRegistry } from './tenant-registry';
