// Failover with the DEFAULT settings (docs/agents.md#failover-timing), measured phase by phase. A worker
// process that runs the agent workflows and holds an agent's context (the README's kind of worker) is
// killed with SIGKILL; the agent's next turn first waits out the dead worker's sticky queue, then the
// holder-loss timeout on the dead worker's own queue, then another worker adopts the context from disk and
// runs the turn. The phases come from the workflow's history and are printed; what the test asserts is
// that the history carries the default timeouts and that the turn lands, byte-exact, on the survivor.
import { randomBytes } from 'node:crypto';

import { temporal } from '@temporalio/proto';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { STICKY_QUEUE_TIMEOUT_MS } from '../../src/plugin/liveness';
import { DEFAULT_AGENT_CONFIG } from '../../src/workflows/definitions';
import { TINY, expectedDigest, startCluster, type TestCluster } from './harness';

const EventType = temporal.api.enums.v1.EventType;
type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster();
});
afterAll(async () => cluster?.close());

const msOf = (time: HistoryEvent['eventTime']): number => Number(time!.seconds) * 1000 + Math.round((time!.nanos ?? 0) / 1e6);
const secondsOf = (duration: { seconds?: unknown; nanos?: number | null } | null | undefined): number =>
  Number(duration?.seconds ?? 0) + (duration?.nanos ?? 0) / 1e9;

it("fails over a killed worker's agent with default settings: phases from the history", async () => {
  const queue = `defaults-${randomBytes(3).toString('hex')}`;
  const agents = new AgentClient(cluster.client, queue, cluster.agents.security);
  // The only worker at first: it runs the agent's workflow tasks (its sticky queue) and holds the context.
  const doomed = await cluster.spawnWorker({ workerId: 'doomed', taskQueue: queue });
  const agent = await agents.start({ agentId: 'defaults', tenant: 'acme', model: TINY }); // no config: the defaults
  await agent.turn(40);
  expect(await agent.turn(8)).toMatchObject({ tokens: 48, turns: 2 });
  expect(await agent.status()).toMatchObject({ holder: doomed.holder, tier: 'device', tokens: 48 });

  const survivor = await cluster.startWorker({ config: { taskQueue: queue } }); // runs agent workflows too
  doomed.child.kill('SIGKILL');
  expect(await doomed.exited).toBe('SIGKILL');
  const killedAt = Date.now();
  const turned = await agent.turn(5);
  const totalMs = Date.now() - killedAt;
  expect(turned).toMatchObject({ tokens: 53, turns: 3 });
  const afterFailover = await agent.status();
  expect(afterFailover).toMatchObject({ holder: survivor.holder, tier: 'device', tokens: 53, failovers: 1 });
  expect(afterFailover.digest).toBe(
    expectedDigest([
      ['defaults', 0, 40],
      ['defaults', 1, 8],
      ['defaults', 2, 5],
    ]),
  );

  const history = await cluster.client.workflow.getHandle(agentWorkflowId('defaults')).fetchHistory();
  const events = (history.events ?? []).filter((e) => msOf(e.eventTime) >= killedAt - 1000);
  const scheduled = (name: string, queueName: string) =>
    events.find(
      (e) =>
        e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED &&
        e.activityTaskScheduledEventAttributes!.activityType!.name === name &&
        e.activityTaskScheduledEventAttributes!.taskQueue!.name === queueName,
    );
  const closing = (of: HistoryEvent) =>
    events.find((e) =>
      [e.activityTaskCompletedEventAttributes, e.activityTaskTimedOutEventAttributes, e.activityTaskFailedEventAttributes].some(
        (a) => a && Number(a.scheduledEventId) === Number(of.eventId),
      ),
    );

  // The turn on the dead worker's queue: the default holder-loss and heartbeat timeouts, and it timed out unserved.
  const onDead = scheduled('turn', doomed.holder)!;
  expect(secondsOf(onDead.activityTaskScheduledEventAttributes!.scheduleToStartTimeout)).toBe(
    DEFAULT_AGENT_CONFIG.timeouts.holderLossMs / 1000,
  );
  expect(secondsOf(onDead.activityTaskScheduledEventAttributes!.heartbeatTimeout)).toBe(DEFAULT_AGENT_CONFIG.timeouts.heartbeatMs / 1000);
  const lost = closing(onDead)!;
  expect(lost.activityTaskTimedOutEventAttributes!.failure!.timeoutFailureInfo!.timeoutType).toBe(
    temporal.api.enums.v1.TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START,
  );
  // The adoption from disk on the shared queue, then the turn on the survivor's queue.
  const recover = scheduled('recover', queue)!;
  const recovered = closing(recover)!;
  expect(recovered.eventType).toBe(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED);
  const onSurvivor = scheduled('turn', survivor.holder)!;
  const turnDone = closing(onSurvivor)!;
  expect(turnDone.eventType).toBe(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED);

  const phases = {
    'kill -> workflow task on a live worker (sticky queue)': msOf(onDead.eventTime) - killedAt,
    "holder-loss timeout on the dead worker's queue": msOf(lost.eventTime) - msOf(onDead.eventTime),
    'workflow task -> recover scheduled': msOf(recover.eventTime) - msOf(lost.eventTime),
    'recover: adoption from disk on the survivor': msOf(recovered.eventTime) - msOf(recover.eventTime),
    'workflow task -> turn scheduled on the survivor': msOf(onSurvivor.eventTime) - msOf(recovered.eventTime),
    'the turn on the survivor': msOf(turnDone.eventTime) - msOf(onSurvivor.eventTime),
  };
  const accounted = Object.values(phases).reduce((a, b) => a + b, 0);
  const lines = Object.entries(phases).map(([phase, ms]) => `  ${String(ms).padStart(6)} ms  ${phase}`);
  console.log(
    [
      `[failover defaults] kill -9 -> turn answered on another worker: ${totalMs} ms (holderLossMs ${DEFAULT_AGENT_CONFIG.timeouts.holderLossMs}, heartbeatMs ${DEFAULT_AGENT_CONFIG.timeouts.heartbeatMs}, sticky queue ${STICKY_QUEUE_TIMEOUT_MS})`,
      ...lines,
      `  ${String(totalMs - accounted).padStart(6)} ms  the rest: update completion and its answer to the client`,
    ].join('\n'),
  );
  await agent.release();
}, 120_000);
