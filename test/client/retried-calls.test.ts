// Calls an application can retry: a call that changes an agent and carries the caller's request id is
// one Temporal update (`${update}/${requestId}`), so sending it again after a lost answer returns the
// first call's result instead of applying it twice. On a real dev server with a GPU worker.
import { afterAll, beforeAll, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric/errors';
import { TEST_AGENT_CONFIG, TINY, startCluster, type TestCluster } from '../temporal/harness';

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster();
  await cluster.startWorker();
});
afterAll(async () => cluster?.close());

it('applies a turn sent twice with one request id once, and answers both with the first result', async () => {
  const agent = await cluster.agents.start({ agentId: 'retried', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  const first = await agent.turn(10, { requestId: 'req-1' });
  const again = await agent.turn(10, { requestId: 'req-1' });
  expect(again).toEqual(first);
  expect(await agent.status()).toMatchObject({ turns: 1, tokens: 10 });

  // A retry with different arguments is still the first call: the id, not the content, names the request.
  expect(await agent.turn(99, { requestId: 'req-1' })).toEqual(first);
  // A new request id is a new turn, and so is a call without one.
  expect(await agent.turn(5, { requestId: 'req-2' })).toMatchObject({ turns: 2, tokens: 15 });
  expect(await agent.turn(5)).toMatchObject({ turns: 3, tokens: 20 });
  expect(await agent.turn(5)).toMatchObject({ turns: 4, tokens: 25 });

  // The same request id on another kind of call is another request.
  const suspended = await agent.suspend('host', { requestId: 'req-1' });
  expect(suspended).toMatchObject({ phase: 'warm', tier: 'host', turns: 4 });
  const resumed = await agent.resume({ requestId: 'req-3' });
  expect(await agent.suspend('host', { requestId: 'req-1' })).toEqual(suspended);
  expect(await agent.resume({ requestId: 'req-3' })).toEqual(resumed);
  expect(await agent.status()).toMatchObject({ phase: 'resumed', tier: 'device', turns: 4, tokens: 25 });

  const history = await cluster.agents.workflow('retried').fetchHistory();
  const updates = history
    .events!.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes)
    .map((e) => e.workflowExecutionUpdateAcceptedEventAttributes!.protocolInstanceId);
  expect(updates.filter((id) => id === 'turn/req-1')).toHaveLength(1);
  await agent.release({ requestId: 'release-1' });
  expect(await agent.release({ requestId: 'release-1' })).toMatchObject({ phase: 'released' });
});

it('refuses a retriable fork or renewal without the capability of its first try', async () => {
  const agent = await cluster.agents.start({ agentId: 'parent', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  await agent.turn(8);
  await expect(agent.fork('child', undefined, { requestId: 'f-1' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  await expect(agent.renew(undefined, { requestId: 'r-1' })).rejects.toBeInstanceOf(FabricError);

  const childCapability = cluster.agents.mintChildCapability(agent.capability, 'child');
  const forked = await agent.fork('child', childCapability, { requestId: 'f-1' });
  const again = await agent.fork('child', childCapability, { requestId: 'f-1' });
  expect(again.status).toEqual(forked.status);
  expect(await agent.status()).toMatchObject({ forks: 1 });
  await forked.child.release();
  await agent.release();
});
