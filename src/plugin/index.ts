// kvfabric as Temporal plugins: one for the worker (memory, activities, agent workflow, data converter,
// the worker-specific queue, metrics, housekeeping, the drain) and one for the client (data converter,
// capability issuer).
export { KvFabricWorkerPlugin, type KvFabricWorkerPluginOptions } from './worker-plugin';
export { KvFabricClientPlugin } from './client-plugin';
export type { KvFabricWorkerOptions, EngineKind, MasterKeySetting } from './worker-options';
export type { DrainReport } from './drain';
export { agentWorkflowBundle, buildAgentWorkflowBundle, workflowsPath } from './workflow-bundle';
