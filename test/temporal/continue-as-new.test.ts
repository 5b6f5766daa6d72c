// Continue-as-new against a dev server whose suggestion threshold is lowered to a few turns' worth of
// events: the agent carries its whole state across runs, concurrent updates survive the hand-over, and
// the restored bytes still verify against the carried digest.
import { afterAll, beforeAll, expect, it } from 'vitest';

import { agentWorkflowId } from '../../src/identity/agent-identity';
import { AGENT_WORKFLOW_TASK_TIMEOUT_MS } from '../../src/workflows/task-timeout';
import { TEST_AGENT_CONFIG, TINY, eventually, recordHistory, startCluster, type TestCluster } from './harness';

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster({ dynamicConfig: { 'limit.historyCount.suggestContinueAsNew': 40 } });
  await cluster.startWorker();
});
afterAll(async () => cluster?.close());

it('continues as new when Temporal suggests it, carrying the state across', async () => {
  const agent = await cluster.agents.start({ agentId: 'long-lived', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  // Six events a hot turn: twenty turns pass the lowered threshold of 40 at least twice.
  for (let i = 0; i < 20; i++) await agent.turn(10);
  const beforeBurst = await agent.status();
  expect(beforeBurst).toMatchObject({ tokens: 200, turns: 20 });
  // Updates in flight while the run hands over must land in the next run, each exactly once.
  const burst = await Promise.all([agent.turn(5), agent.turn(5), agent.turn(5), agent.turn(5)]);
  const after = await agent.status();
  expect(after.run).toBeGreaterThan(2);
  expect(after).toMatchObject({ tokens: 220, turns: 24 });
  expect(new Set(burst.map((outcome) => outcome.tokens)).size).toBe(4);

  // The carried digest still describes the bytes: a round trip through disk verifies against it.
  await agent.suspend('disk');
  const resumed = await agent.resume();
  expect(resumed).toMatchObject({ tier: 'device', tokens: 220, digest: after.digest });
  expect(beforeBurst.digest).not.toBe(after.digest);

  // Search attributes and memo survive the hand-over.
  const listed = await eventually(async () => {
    const found = (await cluster.agents.list({ tenant: 'acme', tier: 'device' })).agents;
    return found.find((a) => a.agentId === 'long-lived' && a.tokens === 220);
  });
  expect(listed).toMatchObject({ tenant: 'acme', status: 'RUNNING' });
  const description = await cluster.agents.workflow('long-lived').describe();
  expect(await description.memo).toMatchObject({ model: 'tiny', tenant: 'acme' });
  // The run continued as new keeps the agent workflow's short task timeout (docs/agents.md#failover-timing).
  expect(Number(description.raw.executionConfig?.defaultWorkflowTaskTimeout?.seconds)).toBe(AGENT_WORKFLOW_TASK_TIMEOUT_MS / 1000);

  // Each run's history stays short.
  const runs = [];
  for await (const run of cluster.client.workflow.list({ query: `WorkflowId = '${agentWorkflowId('long-lived')}'` })) runs.push(run);
  // The suspend and resume above may have crossed the threshold once more.
  expect(runs.length).toBe((await agent.status()).run);
  for (const run of runs) expect(run.historyLength).toBeLessThan(120);
  const first = runs.find((run) => run.status.name === 'CONTINUED_AS_NEW');
  if (first) await recordHistory(cluster.client, 'continue-as-new-first-run', first.workflowId, first.runId);
  await agent.release();
  await recordHistory(cluster.client, 'continue-as-new-last-run', agentWorkflowId('long-lived'));
});
