// A GPU worker: one Temporal Worker on the shared queue with the kvfabric worker plugin, which brings
// everything else (src/plugin/worker-plugin.ts: the memory, the activities, the agent workflow, the
// worker-specific queue `${taskQueue}@${workerId}`, the drain to the cold tier at shutdown). This file is
// only the plugin's first user: the worker process's connection and tuning.
import { NativeConnection, Worker } from '@temporalio/worker';

import type { AgentMemory } from '../agent-memory/agent-memory';
import type { DrainReport } from '../plugin/drain';
import { KvFabricWorkerPlugin } from '../plugin/worker-plugin';
import { reachTemporal } from '../client/reach-temporal';
import { connectionOptionsOf } from '../client/temporal-settings';
import type { WorkerConfig } from './config';

export { workflowsPath } from '../plugin/workflow-bundle';

/** @experimental */
export interface GpuWorkerOptions {
  config: WorkerConfig;
  /** Reuse a connection (tests run several workers in one process); otherwise one is opened from config. */
  connection?: NativeConnection;
}

/** @experimental */
export interface GpuWorker {
  /** This worker's own task queue. */
  readonly holder: string;
  readonly memory: AgentMemory;
  /** Polls until shutdown, then drains held contexts to disk and frees everything. */
  run(): Promise<DrainReport>;
  shutdown(): void;
}

export async function createGpuWorker({ config, connection }: GpuWorkerOptions): Promise<GpuWorker> {
  const plugin = new KvFabricWorkerPlugin({ ...config, agentWorkflows: config.workflows });
  const ownConnection = connection === undefined;
  const conn = connection ?? (await reachTemporal(config.temporal, () => NativeConnection.connect(connectionOptionsOf(config.temporal))));
  let worker: Worker;
  try {
    worker = await Worker.create({
      connection: conn,
      namespace: config.temporal.namespace,
      taskQueue: config.taskQueue,
      maxConcurrentActivityTaskExecutions: config.maxConcurrentActivities,
      shutdownGraceTime: config.shutdownGraceMs,
      plugins: [plugin],
    });
  } catch (err) {
    await plugin.close();
    if (ownConnection) await conn.close();
    throw err;
  }
  return {
    holder: plugin.holder,
    memory: plugin.memory,
    async run(): Promise<DrainReport> {
      try {
        await worker.run();
      } finally {
        if (ownConnection) await conn.close();
      }
      return plugin.drained!;
    },
    shutdown(): void {
      plugin.shutdown();
    },
  };
}
