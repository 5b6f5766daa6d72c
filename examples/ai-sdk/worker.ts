// The worker of the AI SDK example: one Temporal worker with kvfabric (the model, its KV in kvfabric's
// pages) and @temporalio/ai-sdk, whose model calls go to kvfabric's provider. In your project the imports
// are 'kvfabric/plugin' and 'kvfabric/worker'; run it with kvfabric-worker's flags and environment
// (parseWorkerConfig), e.g. `--engine llama --tier-dir /shared/kv` and the keys kvfabric keygen writes.
import { AiSdkPlugin } from '@temporalio/ai-sdk';
import { NativeConnection, Worker } from '@temporalio/worker';

import { KvFabricWorkerPlugin } from '../../src/plugin';
import type { WorkerConfig } from '../../src/worker';

export async function createResearchWorker(config: WorkerConfig, connection: NativeConnection): Promise<Worker> {
  const kvfabric = new KvFabricWorkerPlugin({ ...config, agentWorkflows: false });
  return Worker.create({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: config.taskQueue,
    workflowsPath: require.resolve('./workflows'),
    plugins: [kvfabric, new AiSdkPlugin({ modelProvider: kvfabric.modelProvider() })],
  });
}
