// Capabilities (Ed25519-signed, verified with public keys only), the denial audit log, the AES-256-GCM
// payload codec for Temporal and its codec server.
export * from './claims';
export { CapabilityIssuer, DEFAULT_CAPABILITY_LIFETIME_S, readClaimsUnverified, type MintRequest } from './capability-issuer';
export { CapabilityDenied, CapabilityVerifier, CLOCK_SKEW_S, MAX_CAPABILITY_LENGTH } from './capability-verifier';
export { AuditLog, type AuditSink, type Denial } from './audit-log';
export { CodecKeyRing, EncryptionCodec, ENCRYPTED_ENCODING, sealedKeyIdOf } from './payload-codec';
export { startCodecServer, type CodecServer, type CodecServerOptions } from './codec-server';
export { ed25519PublicOf, keyListFromEnv, keyListText, parseKeyList, type RawKey } from './key-list';
export { newOperatorKeys, type OperatorKeys } from './operator-keys';
export { dataConverterOf } from './data-converter';
