// Public entry of the cold (disk) tier: the store, its key ring, and the shapes of refs and manifests.
export { ColdStore, type ColdStoreOptions } from './cold-store';
export { KeyRing, type MasterKey } from './key-ring';
export type {
  ColdBlockRef,
  ContextAttachment,
  ContextManifest,
  DeleteManifestOptions,
  ManifestLayout,
  OrphanSegmentOptions,
  ReadManifestOptions,
  SegmentOwner,
  WriteManifestOptions,
} from './types';
