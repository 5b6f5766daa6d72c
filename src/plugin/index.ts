// kvfabric as Temporal plugins: one for the worker (memory, activities, agent workflow, data converter,
// the worker-specific queue, metrics, housekeeping, the drain) and one for the client (data converter,
// capability issuer). The worker plugin's modelProvider() serves @temporalio/ai-sdk (docs/ai-sdk.md).
export { KvFabricWorkerPlugin, type KvFabricWorkerPluginOptions } from './worker-plugin';
export { KvFabricClientPlugin } from './client-plugin';
export { KVFABRIC_MODEL_ID, type KvFabricProvider, type KvFabricProviderOptions } from '../ai-sdk/kvfabric-provider';
export type {
  KvFabricWorkerOptions,
  EngineKind,
  MasterKeySetting,
  WorkerChores,
  WorkerEngineOptions,
  WorkerKeys,
  WorkerPoolOptions,
  WorkerS3Settings,
} from './worker-options';
export type { DrainReport } from './drain';
export { agentWorkflowBundle, buildAgentWorkflowBundle, workflowsPath } from './workflow-bundle';
