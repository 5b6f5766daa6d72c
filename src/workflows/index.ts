// The workflow bundle's entry: every function exported here is a workflow type.
export { agentWorkflow } from './agent';
