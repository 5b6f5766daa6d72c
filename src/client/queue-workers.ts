// Whether any worker serves an agent's task queue, asked of the server (DescribeTaskQueue: the pollers
// it saw lately), so that a call with nobody to answer it fails at once, UNAVAILABLE and saying so, and
// not after the server's own wait (a query: 30 s, then `Failed to query Workflow`; an update: for as long
// as the caller waits). The server lists a poller for minutes after it last polled, so a poller counts
// only if it polled within POLLER_FRESH_MS. A worker that stopped less than that ago still counts: the
// call then waits as before.
import { setTimeout as sleep } from 'node:timers/promises';

import type { Client } from '@temporalio/client';
import { optionalTsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';

import { FabricError } from '../fabric/errors';
import { printable } from '../identity/printable-id';

/**
 * A live worker's idle poll lasts up to a minute at the server (its long-poll expiry), and the server
 * records a poller when its poll arrives: one that has not polled for longer than this is gone.
 */
export const POLLER_FRESH_MS = 90_000;
/** How long a call waits for a first poller (a worker that is starting) before it is UNAVAILABLE. */
export const FIRST_POLLER_WAIT_MS = 3000;
/** Once seen, a queue's workers are taken as there for this long without asking again. */
const SEEN_FOR_MS = 30_000;

/** Workers that polled `taskQueue` for workflow tasks within POLLER_FRESH_MS; undefined when the server cannot say. */
export async function pollingWorkers(client: Client, taskQueue: string): Promise<number | undefined> {
  try {
    const { pollers } = await client.workflowService.describeTaskQueue({
      namespace: client.options.namespace,
      taskQueue: { name: taskQueue, kind: temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
      taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    });
    const now = Date.now();
    return (pollers ?? []).filter((poller) => now - (optionalTsToMs(poller.lastAccessTime) ?? now) <= POLLER_FRESH_MS).length;
  } catch {
    return undefined; // a server that does not answer this (the time-skipping test server): the call itself decides
  }
}

/** Remembers when a queue last had workers, so that only the first call in a while asks the server. */
class QueueWorkers {
  private seenAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly client: Client,
    private readonly taskQueue: string,
  ) {}

  /** Resolves once a worker polls the queue; UNAVAILABLE when none does within FIRST_POLLER_WAIT_MS. */
  async expectServed(): Promise<void> {
    if (Date.now() - this.seenAt < SEEN_FOR_MS) return;
    const deadline = Date.now() + FIRST_POLLER_WAIT_MS;
    for (;;) {
      const workers = await pollingWorkers(this.client, this.taskQueue);
      if (workers === undefined) return;
      if (workers > 0) {
        this.seenAt = Date.now();
        return;
      }
      if (Date.now() >= deadline) throw noWorkers(this.taskQueue, this.client.options.namespace);
      await sleep(250);
    }
  }
}

/** Agents whose queue this client remembers at most: past it, the oldest is asked again when next called. */
const REMEMBERED_AGENTS = 10_000;

/**
 * The queue each agent's workflow runs on, as the server tells it once (an agent started on another
 * queue than this client's default is served there), and whether a worker polls that queue.
 */
export class AgentQueueWorkers {
  private readonly queueOf = new Map<string, string>();
  private readonly byQueue = new Map<string, QueueWorkers>();

  constructor(
    private readonly client: Client,
    /** The task queue the agent's workflow runs on; undefined when it has none (no such agent yet). */
    private readonly describeQueue: (agentId: string) => Promise<string | undefined>,
  ) {}

  /** The agent's queue, once a call learned it. */
  queue(agentId: string): string | undefined {
    return this.queueOf.get(agentId);
  }

  /** Resolves once a worker polls the agent's queue; UNAVAILABLE when none does. No such agent: the call says so. */
  async expectServed(agentId: string): Promise<void> {
    let queue = this.queueOf.get(agentId);
    if (queue === undefined) {
      queue = await this.describeQueue(agentId).catch(() => undefined);
      if (queue === undefined) return;
      if (this.queueOf.size >= REMEMBERED_AGENTS) this.queueOf.delete(this.queueOf.keys().next().value!);
      this.queueOf.set(agentId, queue);
    }
    let workers = this.byQueue.get(queue);
    if (!workers) this.byQueue.set(queue, (workers = new QueueWorkers(this.client, queue)));
    await workers.expectServed();
  }
}

function noWorkers(taskQueue: string, namespace: string): FabricError {
  return new FabricError(
    'UNAVAILABLE',
    `no worker serves task queue '${printable(taskQueue)}' (namespace ${printable(namespace)}): none polled it in the last ` +
      `${POLLER_FRESH_MS / 1000} s; start a kvfabric worker on that queue (kvfabric-worker --task-queue), ` +
      "or point this client at the workers' queue",
  );
}
