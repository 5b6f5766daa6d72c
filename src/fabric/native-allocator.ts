// The native allocator: the addon's pool class itself, extended so that options are checked here with
// the rules of docs/allocator.md before any memory is reserved, and a few native answers become
// properties. Every call goes straight to the addon, which checks arguments again (plain-JS callers
// bypass TypeScript) and throws FabricError itself.
import type { CudaProbe, NativePoolOptions } from './addon-types';
import { DEFAULT_SCRUB_POLICY, requireBackend, validatePoolOptions } from './layout';
import { loadNativeBinding } from './native-binding';
import type {
  Backend,
  BackendInfo,
  BlockLayout,
  ContextHandle,
  KvAllocator,
  PoolOptions,
  ScrubPolicy,
  Tier,
  TierPrimitives,
} from './types';

/** Indexed by the native Tier enum: kDisk = 0 (only the disk copy), kDevice = 1, kHost = 2. */
const PAGE_RESIDENCY: readonly Tier[] = ['disk', 'device', 'host'];

/** The backend when options name none: KVFABRIC_BACKEND (so one env var moves a whole test run), else auto. */
export function defaultBackend(): Backend {
  const env = process.env.KVFABRIC_BACKEND;
  return env === undefined || env === '' ? 'auto' : requireBackend(env, 'KVFABRIC_BACKEND');
}

function withDefaultBackend(options: PoolOptions): PoolOptions {
  if (typeof options !== 'object' || options === null || options.backend !== undefined) return options;
  return { ...options, backend: defaultBackend() };
}

/** Whether CUDA device `device` is usable here, and if not why (the addon's probe; never throws for CUDA). */
export function probeCuda(device = 0): CudaProbe {
  return loadNativeBinding().cudaProbe(device);
}

/** The addon's options object from checked PoolOptions: the shape's fields flattened in. */
function nativeOptions(options: PoolOptions): NativePoolOptions {
  const normalized = validatePoolOptions(withDefaultBackend(options));
  return {
    ...normalized.shape,
    tokensPerBlock: normalized.tokensPerBlock,
    blockCount: normalized.blockCount,
    hostBlockCount: normalized.hostBlockCount,
    maxContexts: normalized.maxContexts,
    scrub: normalized.scrub,
    backend: normalized.backend,
    device: normalized.device,
    deviceMemoryFraction: normalized.deviceMemoryFraction,
    verifyMoves: normalized.verifyMoves,
  };
}

export class NativeAllocator extends loadNativeBinding().NativePool implements KvAllocator, TierPrimitives {
  readonly layout: BlockLayout;
  readonly scrubPolicy: ScrubPolicy;
  /** Which backend this pool got (cpu or cuda) and why. */
  readonly backendInfo: BackendInfo;

  constructor(options: PoolOptions) {
    super(nativeOptions(options));
    this.layout = Object.freeze(this.blockLayout());
    this.backendInfo = Object.freeze(this.describeBackend());
    this.scrubPolicy = options.scrub ?? DEFAULT_SCRUB_POLICY;
  }

  /** Each page's tier. */
  pageResidency(ctx: ContextHandle): Tier[] {
    return Array.from(this.pageTiers(ctx), (tier) => PAGE_RESIDENCY[tier] ?? 'disk');
  }
}
