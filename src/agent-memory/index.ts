// One worker's agent contexts: admission (capabilities against grants), turns, tier moves, digests and
// verification. Knows nothing of Temporal: the activities adapt it, the drain and tests use it directly.
export { AgentMemory, type MemoryObserver, type RunAdmitted, type TransferDirection } from './agent-memory';
export { CapabilityCheck, CUSTODY_ACTIONS, RIGHT_FOR, type Presented } from './capability-check';
export { digestOfBytes, emptyDigest, pageDigest, type DigestState } from './context-digest';
export { ContextVerifier } from './context-verifier';
export type { ContextSnapshot } from './context-snapshot';
export type { Allocated, ForkResult, ReleaseResult, ResumeResult, SuspendResult, TurnResult } from './operation-results';
export type { AppliedTurn, TurnFields, TurnInput, TurnReply } from './turn';
