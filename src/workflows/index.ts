// The workflow bundle's entry: every function exported here is a workflow type.
export { agentWorkflow } from './agent';
export { workerLeaseWorkflow } from './worker-lease';
// Types only (no workflow types): what a user's workflow needs to start an agent as its child.
export type { AgentConfig, AgentInput, AgentModel, AgentStatus, TurnOutcome } from './definitions';
