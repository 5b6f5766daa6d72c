// Public entry of the client library: AgentClient and AgentHandle, the model catalog an agent is started
// with, and how a client process reads its connection settings and keys.
export {
  AgentClient,
  AgentHandle,
  agentConfig,
  updateIdOf,
  type AgentConfigOverrides,
  type AgentList,
  type AgentListing,
  type CallOptions,
  type ForkOptions,
  type RenewOptions,
  type ListFilter,
  type SkippedAgent,
  type StartAgentOptions,
} from './agent-client';
export { MODELS, modelNamed } from '../engines/models';
export type { AgentConfig, AgentInput, AgentModel, AgentStatus, TurnOutcome, TurnReply } from '../workflows/definitions';
export { clientSecurityFromEnv, codecKeyRingFromEnv, type ClientSecurity } from './client-security';
export { connectionOptionsOf, temporalSettings, type TemporalSettings } from './temporal-settings';
export { registerSearchAttributes } from './search-attributes';
