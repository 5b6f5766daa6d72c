// Security on a real dev server. What someone reading the Temporal server without the codec keys sees: a demo-like agent's raw history
// (inputs, continue-as-new state, update arguments, activity inputs and results, failure messages) holds no capability and no KV-derived data (the context digests). With the
// keys, the same history decodes -- so the test would notice a leak, not just unreadable bytes. And
// renewal: the workflow's own capability is replaced, the old one revoked, timers go on with the new.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric/errors';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { TEST_AGENT_CONFIG, TINY, everythingIn, eventually, startCluster, type TestCluster } from '../temporal/harness';

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster();
  await cluster.startWorker();
});
afterAll(async () => cluster?.close());

describe('history privacy', () => {
  it('keeps capabilities and KV-derived data out of the raw history; the codec opens it', async () => {
    const planner = await cluster.agents.start({ agentId: 'private-planner', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    const other = await cluster.agents.start({ agentId: 'private-other', tenant: 'globex', model: TINY, config: TEST_AGENT_CONFIG });
    await planner.turn(40);
    const { child } = await planner.fork('private-child');
    const childStatus = await child.turn(8);
    const denied = await cluster.agents.agent('private-planner', other.capability).resume().catch((err: unknown) => err);
    expect(denied).toBeInstanceOf(FabricError);
    expect((denied as FabricError).code).toBe('PERMISSION_DENIED');
    await planner.suspend('disk');
    const resumed = await planner.resume();

    const secrets = [planner.capability, child.capability, other.capability].flatMap((token) => [token, token.split('.')[2]!, token.split('.')[1]!]);
    const kvDerived = [resumed.digest, childStatus.digest];
    for (const agentId of ['private-planner', 'private-child']) {
      const raw = await everythingIn(cluster.rawClient, agentId);
      for (const secret of [...secrets, ...kvDerived]) expect(raw.includes(secret), `${agentId} history holds a secret in plaintext`).toBe(false);
      expect(raw).not.toMatch(/"capability"|"childCapability"|"digest"/);
      // Failure messages are sealed too: the refused resume's reason is not readable.
      expect(raw).not.toMatch(/denied: |wrong-context/);
    }
    // The same history through the codec: the planner's own capability and digest are there.
    const decoded = await cluster.client.workflow.getHandle(agentWorkflowId('private-planner')).fetchHistory();
    const codec = cluster.client.options.loadedDataConverter;
    const started = decoded.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads ?? [];
    const [input] = await codec.payloadCodecs[0]!.decode(started);
    expect(Buffer.from(input!.data!).toString()).toContain(planner.capability);
    await child.release();
    await planner.release();
    await other.release();
  });
});

describe('renewal', () => {
  it('replaces the capability in the workflow, revokes the old one, and the timers act with the new one', async () => {
    const config = { ...TEST_AGENT_CONFIG, timers: { idleToWarmMs: 1500, warmToColdMs: 600_000 } };
    const first = await cluster.agents.start({ agentId: 'renewed', tenant: 'acme', model: TINY, config });
    await first.turn(20);
    const second = await first.renew();
    expect(second.capability).not.toBe(first.capability);
    await expect(first.turn(1)).rejects.toMatchObject({ code: 'PERMISSION_DENIED', message: expect.stringContaining('revoked') });
    expect(await second.turn(4)).toMatchObject({ tokens: 24 });
    // The idle timer demotes with the workflow's own capability: the start one is revoked, so only the renewal works.
    await eventually(async () => ((await second.status()).phase === 'warm' ? true : undefined), 15_000, 'warm after renewal');
    expect(await second.status()).toMatchObject({ tier: 'host', denials: 1 });
    await second.release();
    await expect(cluster.agents.agent('renewed', second.capability).resume()).rejects.toMatchObject({ code: 'INVALID_STATE' });
  });
});
