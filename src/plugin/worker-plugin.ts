// The kvfabric worker plugin: added to a Temporal Worker (`Worker.create({ ..., plugins: [plugin] })`),
// it makes that worker a kvfabric GPU worker. To the user's worker, on its task queue (kvfabric's shared
// queue), it adds the placement activities, the agent workflow and kvfabric's data converter. kvfabric
// needs a second poller too: the worker-specific queue `${taskQueue}@${workerId}`, where every later
// call on a context this worker holds goes (Temporal's worker-specific-task-queues pattern). The plugin
// creates that second Worker itself, on the user's connection and namespace with the same converter,
// activity slots and shutdown grace, when the user's `worker.run()` starts (the runWorker hook), and runs
// it alongside: both start together, either stopping stops the other, and when both have stopped the
// plugin drains the held contexts to the cold tier, tells their agents' workflows that it left (their
// next calls adopt the contexts elsewhere at once: handover.ts) and closes the memory. From start to
// drained it keeps the process alive through the shutdown signals (drain-signals.ts), so
// `await worker.run()` returns only once every held context is on disk. The holder's Worker takes every
// call at once and runs as many as the user's worker does (holder-calls.ts); both workers get kvfabric's
// liveness settings (liveness.ts).
// Metrics and housekeeping run for as long as the worker does. The memory itself opens when the user's
// worker is created (configureWorker); if that creation fails after this plugin's turn, close() frees it.
// With a model, modelProvider() serves @temporalio/ai-sdk's model calls on the same worker (docs/ai-sdk.md);
// the user's workflows get the interceptor that gives those calls a heartbeat timeout (withModelCallTimeouts).
//
// Agent workflow code: a worker with no workflows of its own gets kvfabric's bundle (workflow-bundle.ts:
// built ahead of time, or once per process); one with a workflowsPath gets an entry that exports its
// workflows and the agent workflow; one with its own workflowBundle must have bundled the agent workflow
// into it (export { agentWorkflow, workerLeaseWorkflow } from kvfabric's workflows). One plugin instance serves one worker.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

import type { ConnectionLike } from '@temporalio/client';
import { msToNumber } from '@temporalio/common/lib/time';
import { Runtime, type Worker, type ReplayWorkerOptions, type WorkerOptions, type WorkerPlugin } from '@temporalio/worker';

import type { AgentMemory } from '../agent-memory/agent-memory';
import { KvFabricProvider, type KvFabricProviderOptions } from '../ai-sdk/kvfabric-provider';
import type { ModelCallMemory } from '../ai-sdk/model-call-memory';
import { modelMemoryActivities } from '../ai-sdk/model-memory-activities';
import { MODEL_CALL_ACTIVITIES } from '../ai-sdk/model-call-timeouts';
import { CodecKeyRing } from '../security/payload-codec';
import { AGENT_WORKFLOW_TYPE } from '../workflows/definitions';
import type { ModelMemoryActivities } from '../workflows/model-memory';
import { WORKER_LEASE_WORKFLOW_TYPE } from '../workflows/worker-lease-definitions';
import { ActivityOnlyWorker } from './activity-only-worker';
import { withKvFabricConverter } from './converter';
import { refusalLog } from './refusal-log';
import { quietLongTurnWarnings } from './task-duration-warning';
import { drainToDisk, type DrainReport } from './drain';
import { endedRuns } from './ended-runs';
import { handOver } from './handover';
import { holdShutdownSignals } from './drain-signals';
import { HOLDER_CALLS_TAKEN, queuedCalls } from './holder-calls';
import { startHousekeeping } from './housekeeping';
import { HEARTBEAT_THROTTLE_MS, withLivenessDefaults } from './liveness';
import { agentWorkflowBundle, modelCallTimeoutsPath, workflowsPath } from './workflow-bundle';
import { LEASE_NEWS_MS, workerLease, type WorkerLease } from './worker-lease';
import { openWorkerMemory, type WorkerMemory } from './worker-memory';
import type { KvFabricWorkerOptions } from './worker-options';

/** The SDK's default activity slots, when the user's options name none. */
const SDK_ACTIVITY_SLOTS = 100;

/**
 * The worker plugin's options: the memory's (KvFabricWorkerOptions) and whether it runs agent workflows.
 * @experimental
 */
export interface KvFabricWorkerPluginOptions extends KvFabricWorkerOptions {
  /** Whether the worker also runs agent workflows (default true; GPU workers may leave them to others). */
  agentWorkflows?: boolean;
}

interface Node {
  holder: string;
  memory: WorkerMemory;
  holderOptions: WorkerOptions;
  lease: WorkerLease;
}

export class KvFabricWorkerPlugin implements WorkerPlugin {
  readonly name = 'kvfabric';
  private holderQueue: string | undefined;
  private node: Node | undefined;
  private drainReport: DrainReport | undefined;
  private stopRequested = false;
  private running: Worker[] = [];
  private closed = false;

  constructor(private readonly options: KvFabricWorkerPluginOptions) {}

  /** This worker's own task queue, once the worker is created. */
  get holder(): string {
    return this.configured().holder;
  }

  /**
   * The worker's agent memory, for tests and operators' tools.
   * @experimental
   */
  get memory(): AgentMemory {
    return this.configured().memory.memory;
  }

  /**
   * The worker's model as an AI SDK provider, for @temporalio/ai-sdk on the same worker:
   * `new AiSdkPlugin({ modelProvider: plugin.modelProvider() })` (docs/ai-sdk.md). Calls reach it once the
   * worker runs.
   * @experimental Follows @temporalio/ai-sdk, itself experimental.
   */
  modelProvider(options: KvFabricProviderOptions = {}): KvFabricProvider {
    return new KvFabricProvider(() => this.configured().memory.modelCalls, options);
  }

  /**
   * What the drain at the end of `worker.run()` wrote; absent until then.
   * @experimental
   */
  get drained(): DrainReport | undefined {
    return this.drainReport;
  }

  /**
   * Stops the worker this plugin serves and the holder's, which then drain. Unlike Worker.shutdown it
   * may come before they poll (run() is still creating the holder's Worker): they then never start.
   */
  shutdown(): void {
    this.stopRequested = true;
    this.node?.lease.stop();
    for (const w of this.running) if (w.getState() === 'RUNNING') w.shutdown();
  }

  /** Frees the memory of a worker that will never run (its Worker.create failed after this plugin's hook). */
  async close(): Promise<void> {
    if (!this.node || this.running.length > 0 || this.closed) return;
    this.closed = true;
    await this.node.memory.close();
  }

  async configureWorker(options: WorkerOptions): Promise<WorkerOptions> {
    // The holder worker below is created on the same connection: a plugin on that connection reaches it too.
    if (options.taskQueue !== undefined && options.taskQueue === this.holderQueue) return options;
    if (this.holderQueue !== undefined) throw new Error('a KvFabricWorkerPlugin serves one worker: create one per worker');
    if (!options.taskQueue) throw new TypeError("the kvfabric plugin needs the worker's task queue (kvfabric's shared queue)");
    const holder = `${options.taskQueue}@${this.options.workerId}`;
    this.holderQueue = holder;
    const refusals = refusalLog(
      Runtime.instance().logger,
      this.options.keys.codec.map((key) => key.id),
    );
    const dataConverter = withKvFabricConverter(options.dataConverter, this.codec(), refusals);
    quietLongTurnWarnings();
    const workflows = this.options.agentWorkflows === false ? withLeaseWorkflow(options) : await withAgentWorkflow(options);
    const memory = await openWorkerMemory(this.options, holder, this.options.agentWorkflows !== false);
    // The holder worker is created when the user's worker runs: created here, it would hold the
    // connection even if the user's Worker.create failed after this hook.
    // As many calls run at once as on the user's worker; any more are taken and wait, heartbeating.
    const running = options.maxConcurrentActivityTaskExecutions ?? SDK_ACTIVITY_SLOTS;
    const lease = workerLease(holder, memory.memory, (message, meta) => Runtime.instance().logger.warn(message, { ...meta }));
    const holderOptions: WorkerOptions = {
      ...(options.connection ? { connection: options.connection } : {}),
      ...(options.namespace ? { namespace: options.namespace } : {}),
      ...(options.shutdownGraceTime !== undefined ? { shutdownGraceTime: options.shutdownGraceTime } : {}),
      maxConcurrentActivityTaskExecutions: Math.max(HOLDER_CALLS_TAKEN, running),
      // Its lease's news of what it holds reaches the server within LEASE_NEWS_MS (worker-lease.ts).
      maxHeartbeatThrottleInterval: Math.min(msToNumber(options.maxHeartbeatThrottleInterval ?? HEARTBEAT_THROTTLE_MS), LEASE_NEWS_MS),
      taskQueue: holder,
      // The lease's heartbeat takes no call slot: it runs for as long as the worker does.
      activities: { ...queuedCalls(memory.activities.holder, running), ...lease.holderActivities },
      dataConverter,
    };
    this.node = { holder, memory, holderOptions, lease };
    return withLivenessDefaults({
      ...options,
      ...workflows,
      ...withModelCallTimeouts(options),
      dataConverter,
      activities: {
        ...options.activities,
        ...memory.activities.placement,
        ...memory.activities.local,
        ...modelMemoryActivitiesOf(memory, holder),
        ...lease.sharedActivities,
      },
    });
  }

  async configureReplayWorker(options: ReplayWorkerOptions): Promise<ReplayWorkerOptions> {
    return { ...options, ...(await withAgentWorkflow(options)), dataConverter: withKvFabricConverter(options.dataConverter, this.codec()) };
  }

  async runWorker(worker: Worker, next: (w: Worker) => Promise<void>): Promise<void> {
    if (worker.options.taskQueue === this.holderQueue) return next(worker); // the holder worker itself (see configureWorker)
    const { holder, memory } = this.configured();
    if (this.closed) throw new Error('this kvfabric plugin was closed: its memory is gone');
    const logger = Runtime.instance().logger;
    // From here until the drain is done a shutdown signal stops the workers, never the process.
    const signals = holdShutdownSignals((signal, first) => {
      this.node?.lease.stop();
      const contexts = this.closed ? 0 : memory.memory.heldContextIds().length; // closed: drained, about to return
      if (first)
        logger.info(`kvfabric GPU worker stopping on ${signal}: running calls finish, then held contexts drain to the tier directory`, {
          holder,
          contexts,
        });
      else
        logger.warn(`kvfabric GPU worker still draining: ${signal} does not interrupt it (SIGKILL would, losing what is not on disk yet)`, {
          holder,
          contexts,
        });
    });
    try {
      await this.runAndDrain(worker, next);
    } finally {
      signals.release();
    }
  }

  /** Runs the user's worker and the holder's together, then drains and closes the memory (see the header). */
  private async runAndDrain(worker: Worker, next: (w: Worker) => Promise<void>): Promise<void> {
    const { holder, memory, holderOptions, lease } = this.configured();
    const logger = Runtime.instance().logger;
    let holderWorker: Worker;
    try {
      holderWorker = await ActivityOnlyWorker.create(withModelCalls(holderOptions, worker));
    } catch (err) {
      this.closed = true;
      await memory.close();
      throw err;
    }
    logger.info('kvfabric GPU worker ready', {
      holder,
      backend: memory.backend,
      model: memory.model.name,
      ...(memory.engine.modelFile ? { modelFile: memory.engine.modelFile } : {}),
      engine: `${memory.engine.fingerprint.engine} ${memory.engine.fingerprint.version}`,
      deviceBlocks: this.options.pool.deviceBlocks,
      hostBlocks: this.options.pool.hostBlocks,
      workflows: this.options.agentWorkflows !== false,
    });
    memory.metrics.start();
    const { modelCalls } = memory;
    const connection = holderOptions.connection;
    const housekeeping = startHousekeeping(memory.memory, {
      intervalMs: this.options.chores.housekeepingMs,
      orphanMinAgeMs: this.options.chores.orphanMinAgeMs,
      log: (message, meta) => logger.info(message, { holder, ...meta }),
      // With the user's connection only: a worker on the SDK's default one has no client to ask.
      ...(connection ? { releaseEndedRuns: releaseEndedRunsOf(modelCalls, connection) } : {}),
    });
    // If either poller fails, the other stops too: half a GPU worker would hold contexts nobody can reach.
    const stopBoth = (): void => {
      for (const w of [worker, holderWorker]) if (w.getState() === 'RUNNING') w.shutdown();
    };
    this.running = [worker, holderWorker];
    const runs = [next(worker).finally(stopBoth), holderWorker.run().finally(stopBoth)];
    // Both started in this synchronous step: a shutdown() that came while the holder's Worker was being
    // created stops them now (a Worker never run would keep its hold on the connection).
    if (this.stopRequested) stopBoth();
    else await this.startLease(worker);
    const outcomes = await Promise.allSettled(runs);
    lease.stop();
    memory.metrics.stop();
    await housekeeping.stop();
    await memory.modelCalls.settled(); // AI SDK calls' KV into their pages first: the drain writes those
    const report = await drainToDisk(memory.memory);
    this.drainReport = report;
    logger.info('kvfabric GPU worker drained', { holder, contexts: report.contexts, bytes: report.bytes, failed: report.failed.length });
    await this.handOver(report.written);
    this.closed = true;
    await memory.close();
    const failure = outcomes.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
    if (failure) throw failure.reason;
  }

  /**
   * Starts the worker's lease (worker-lease.ts). Without it the worker still serves its agents, and a
   * crash costs them holderLossMs after their next call instead: logged, not fatal.
   */
  private async startLease(worker: Worker): Promise<void> {
    const { holder, lease } = this.configured();
    try {
      const { client } = worker;
      if (!client) throw new Error('the worker has no client (a replay worker?)');
      await lease.start(client, worker.options.taskQueue, () => worker.getState() === 'RUNNING');
    } catch (err) {
      Runtime.instance().logger.warn('kvfabric GPU worker could not start its lease: its agents fail over after holderLossMs if it dies', {
        holder,
        error: err instanceof Error ? err.message : String(err),
      });
    }
  }

  /** Tells the drained agents' workflows that this worker left (handover.ts), on the user's connection. */
  private async handOver(drained: readonly string[]): Promise<void> {
    const { holder, memory, holderOptions } = this.configured();
    const logger = Runtime.instance().logger;
    const { connection, dataConverter } = holderOptions;
    if (drained.length === 0) return;
    if (!connection || !dataConverter) {
      // The SDK's default connection is the worker's own: there is no client to reach the workflows with.
      logger.warn('kvfabric GPU worker cannot hand its agents over without a connection of its own: they fail over after holderLossMs', {
        holder,
      });
      return;
    }
    const report = await handOver({
      connection,
      namespace: holderOptions.namespace ?? 'default',
      dataConverter,
      holder,
      memory: memory.memory,
      drained,
    });
    logger.info('kvfabric GPU worker handed its agents over', { holder, agents: report.agents, failed: report.failed.length });
  }

  private codec(): CodecKeyRing {
    return new CodecKeyRing(this.options.keys.codec, this.options.keys.activeCodecKeyId);
  }

  private configured(): Node {
    if (!this.node) throw new Error('the kvfabric plugin has not configured a worker yet (Worker.create with plugins: [plugin])');
    return this.node;
  }
}

/** What a workflow's releaseModelMemory() and wake-ups call (src/workflows/model-memory.ts). */
function modelMemoryActivitiesOf(memory: WorkerMemory, holder: string): ModelMemoryActivities {
  return modelMemoryActivities(memory.modelCalls, { worker: holder, observer: memory.metrics });
}

/**
 * The holder's options with the user's worker's AI SDK model calls among its activities: after a planned
 * wake-up's prefetch here, the run's next model call is sent to this worker's own queue
 * (src/ai-sdk/model-call-route.ts), where its KV now is.
 */
function withModelCalls(holderOptions: WorkerOptions, worker: Worker): WorkerOptions {
  const modelCalls = [...worker.options.activities].filter(([name]) => MODEL_CALL_ACTIVITIES.has(name));
  return { ...holderOptions, activities: { ...holderOptions.activities, ...Object.fromEntries(modelCalls) } };
}

/** The housekeeping's chore for AI SDK agents: their KV freed once the server says their run has ended. */
function releaseEndedRunsOf(modelCalls: ModelCallMemory, connection: ConnectionLike): () => Promise<string[]> {
  const ended = endedRuns(connection);
  return () => modelCalls.releaseEnded(ended);
}

/** The worker's workflow options with the agent workflow among them (see the header). */
async function withAgentWorkflow(
  options: Pick<WorkerOptions, 'workflowsPath' | 'workflowBundle'>,
): Promise<Pick<WorkerOptions, 'workflowsPath' | 'workflowBundle'>> {
  if (options.workflowBundle) return {};
  if (options.workflowsPath)
    return { workflowsPath: combinedEntry(options.workflowsPath, [AGENT_WORKFLOW_TYPE, WORKER_LEASE_WORKFLOW_TYPE]) };
  return { workflowBundle: await agentWorkflowBundle(Runtime.instance().logger) };
}

/**
 * A worker that leaves agent workflows to others still runs its own lease's workflow beside the user's:
 * it starts the lease on its own queue, where an AI SDK deployment may run no agent workflows at all, and a
 * lease no worker can run fails its workflow task for ever. A worker with no workflows (--no-workflows)
 * leaves its lease to the agent workflows' workers on its queue.
 */
function withLeaseWorkflow(options: Pick<WorkerOptions, 'workflowsPath' | 'workflowBundle'>): Pick<WorkerOptions, 'workflowsPath'> {
  if (options.workflowBundle || !options.workflowsPath) return {};
  return { workflowsPath: combinedEntry(options.workflowsPath, [WORKER_LEASE_WORKFLOW_TYPE]) };
}

/**
 * The user's workflows, bundled from a workflowsPath, get the interceptor that gives kvfabric's AI SDK model
 * calls a heartbeat timeout (src/ai-sdk/model-call-timeouts.ts); a workflowBundle of the user's must bundle it
 * itself (docs/ai-sdk.md), and kvfabric's own bundle makes no model calls.
 */
function withModelCallTimeouts(
  options: Pick<WorkerOptions, 'workflowsPath' | 'workflowBundle' | 'interceptors'>,
): Pick<WorkerOptions, 'interceptors'> {
  if (options.workflowBundle || !options.workflowsPath) return {};
  const workflowModules = [...(options.interceptors?.workflowModules ?? []), modelCallTimeoutsPath()];
  return { interceptors: { ...options.interceptors, workflowModules } };
}

/** A workflow entry module exporting the user's workflows and kvfabric's `names`, written once per user path and names. */
function combinedEntry(userPath: string, names: readonly string[]): string {
  // Beside the user's node_modules, where the bundler's own entry can resolve @temporalio/workflow.
  const workflowPackage = require.resolve('@temporalio/workflow/package.json', { paths: [dirname(userPath)] });
  const directory = join(dirname(workflowPackage), '..', '..', '.cache', 'kvfabric-workflow-entries');
  const entryKey = `${userPath}\n${names.join(',')}`;
  const path = join(directory, `${createHash('sha256').update(entryKey).digest('hex').slice(0, 16)}.ts`);
  mkdirSync(directory, { recursive: true });
  // Written aside and renamed: another process may be bundling from the same entry at this moment.
  const aside = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
  const kvfabric = JSON.stringify(workflowsPath());
  writeFileSync(aside, `export * from ${JSON.stringify(userPath)};\nexport { ${names.join(', ')} } from ${kvfabric};\n`);
  renameSync(aside, path);
  return path;
}
