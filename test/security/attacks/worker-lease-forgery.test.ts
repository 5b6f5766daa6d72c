// Attack: a lease started against a live GPU worker. Each GPU worker starts a lease workflow whose heartbeat
// activity runs on the worker's own queue and names the agents it holds, with their custody proofs, in its
// heartbeats; when the heartbeat stops, the lease tells those agents their holder is gone
// (src/workflows/worker-lease.ts). A client of the namespace (any tenant's: it has the codec keys) could
// start such a workflow itself, naming a live worker's queue and a heartbeat timeout too short for any
// worker to meet, to make the server time the heartbeat out: the victim's agents would be pushed off their
// holder and their proofs recorded in a history the attacker can decode. The worker runs the heartbeat
// only for the leases it started itself (unguessable ids): the forged lease's heartbeat is refused with
// PERMISSION_DENIED before it heartbeats once, its history names no agent, and the agents keep their
// holder. Real dev server, real worker (synthetic engine).
import { afterAll, beforeAll, expect, it } from 'vitest';

import { agentWorkflowId } from '../../../src/identity/agent-identity';
import { WORKER_LEASE_WORKFLOW_TYPE, type WorkerLeaseInput } from '../../../src/workflows/worker-lease-definitions';
import { TEST_AGENT_CONFIG, TINY, startCluster, type TestCluster } from '../../temporal/harness';

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster();
});
afterAll(async () => cluster?.close());

it("a lease forged against a live worker's queue learns nothing and moves no agent", async () => {
  const worker = await cluster.startWorker();
  const agent = await cluster.agents.start({ agentId: 'lease-victim', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  await agent.turn(24);
  expect(await agent.status()).toMatchObject({ holder: worker.holder, failovers: 0 });

  const forged: WorkerLeaseInput = { holder: worker.holder, heartbeatTimeoutMs: 1000 };
  const lease = await cluster.client.workflow.start(WORKER_LEASE_WORKFLOW_TYPE, {
    args: [forged],
    taskQueue: cluster.taskQueue,
    workflowId: `kvfabric-lease-${worker.holder}-forged`,
  });
  await lease.result(); // ends: its heartbeat was refused, which is no death to report
  const { events } = await lease.fetchHistory();
  const failed = events!.find((event) => event.activityTaskFailedEventAttributes);
  expect(failed?.activityTaskFailedEventAttributes?.failure?.applicationFailureInfo?.type).toBe('PERMISSION_DENIED');
  expect(events!.some((event) => event.activityTaskTimedOutEventAttributes)).toBe(false);
  expect(events!.some((event) => event.activityTaskScheduledEventAttributes?.activityType?.name === 'kvfabricHolderLost')).toBe(false);

  // The agent never heard of it: same holder, no failover, and its next turn runs there.
  expect(await agent.turn(8)).toMatchObject({ tokens: 32, turns: 2 });
  expect(await agent.status()).toMatchObject({ holder: worker.holder, failovers: 0 });
  const agentEvents = (await cluster.client.workflow.getHandle(agentWorkflowId('lease-victim')).fetchHistory()).events!;
  expect(
    agentEvents.some((event) => event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === 'holderLeft'),
  ).toBe(false);
  await agent.release();
}, 120_000);
