// Public entry of the client library: AgentClient and AgentHandle, and how a client process reads its
// connection settings and keys.
export {
  AgentClient,
  AgentHandle,
  agentConfig,
  updateIdOf,
  type AgentConfigOverrides,
  type AgentListing,
  type CallOptions,
  type ForkOptions,
  type RenewOptions,
  type ListFilter,
  type StartAgentOptions,
} from './agent-client';
export { clientSecurityFromEnv, type ClientSecurity } from './client-security';
export { connectionOptionsOf, temporalSettings, type TemporalSettings } from './temporal-settings';
export { registerSearchAttributes } from './search-attributes';
