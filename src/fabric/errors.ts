// Typed errors shared with the native addon: the C++ core uses the same codes (native/src/core/status.h),
// and the addon throws FabricError instances directly, so callers switch on `code`, never on messages.

export const ERROR_CODES = [
  'INVALID_ARGUMENT',
  'OUT_OF_RANGE',
  'POOL_EXHAUSTED',
  'STALE_HANDLE',
  'BUSY',
  'INVALID_STATE',
  'PERMISSION_DENIED',
  'INTEGRITY',
  'OUT_OF_MEMORY',
  'UNAVAILABLE',
  'STORAGE_FULL',
  // A context's KV from another model or engine setting (src/engines/fingerprint.ts): loading it would be
  // wrong or, in llama.cpp, could crash the process.
  'INCOMPATIBLE',
  // A tenant's quota on this worker (blocks on a tier, or pinned) would be exceeded: src/tiers/tenant-quotas.ts.
  // Refused without touching another tenant's contexts; retrying does not help until the tenant frees some.
  'RESOURCE_EXHAUSTED',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export class FabricError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string) {
    super(message);
    this.name = 'FabricError';
    this.code = code;
  }
}

export function isFabricError(err: unknown, code?: ErrorCode): err is FabricError {
  return err instanceof FabricError && (code === undefined || err.code === code);
}
