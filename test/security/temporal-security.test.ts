// Security on a real dev server. What someone reading the Temporal server without the codec keys sees: a demo-like agent's raw history
// (inputs, continue-as-new state, update arguments, activity inputs and results, failure messages) holds no capability and no KV-derived data (the context digests). With the
// keys, the same history decodes -- so the test would notice a leak, not just unreadable bytes. And
// renewal: the workflow's own capability is replaced, the old one revoked, timers go on with the new.
// And what a reader who does decode the history gets: the workflow's custodian token, which moves the
// agent between tiers and workers but cannot resume, append, fork, release or renew it.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric/errors';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { readClaimsUnverified } from '../../src/security/capability-issuer';
import type { AgentInput } from '../../src/workflows/definitions';
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
    expect(await child.turn(8)).toMatchObject({ tokens: 48, turns: 1 });
    const childStatus = await child.status();
    const denied = await cluster.agents
      .agent('private-planner', other.capability)
      .resume()
      .catch((err: unknown) => err);
    expect(denied).toBeInstanceOf(FabricError);
    expect((denied as FabricError).code).toBe('PERMISSION_DENIED');
    await planner.suspend('disk');
    const resumed = await planner.resume();

    const carried = await carriedToken('private-planner');
    const secrets = [planner.capability, child.capability, other.capability, carried].flatMap((token) => [
      token,
      token.split('.')[2]!,
      token.split('.')[1]!,
    ]);
    const kvDerived = [resumed.digest, childStatus.digest];
    for (const agentId of ['private-planner', 'private-child']) {
      const raw = await everythingIn(cluster.rawClient, agentId);
      for (const secret of [...secrets, ...kvDerived])
        expect(raw.includes(secret), `${agentId} history holds a secret in plaintext`).toBe(false);
      expect(raw).not.toMatch(/"capability"|"childCapability"|"digest"/);
      // Failure messages are sealed too: the refused resume's reason is not readable.
      expect(raw).not.toMatch(/denied: |wrong-context/);
    }
    // The same history through the codec: the workflow's input opens, and holds the planner's custodian token, not its own.
    expect(readClaimsUnverified(carried)).toMatchObject({ sub: 'private-planner', rights: ['custody'] });
    expect(carried).not.toBe(planner.capability);
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

describe('the token the workflow carries', () => {
  it('is a custodian: taken from the decoded history it cannot resume, append, fork, release or renew; timers and failover run with it', async () => {
    const config = { ...TEST_AGENT_CONFIG, timers: { idleToWarmMs: 1500, warmToColdMs: 600_000 } };
    const owner = await cluster.agents.start({ agentId: 'custodied', tenant: 'acme', model: TINY, config });
    await owner.turn(16);
    const carried = await carriedToken('custodied');
    expect(readClaimsUnverified(carried)).toMatchObject({ sub: 'custodied', wf: agentWorkflowId('custodied'), rights: ['custody'] });

    const thief = cluster.agents.agent('custodied', carried);
    const refused = { code: 'PERMISSION_DENIED', message: expect.stringContaining('custodian-token') };
    await expect(thief.resume()).rejects.toMatchObject(refused); // a resume is how a caller reads the context back
    await expect(thief.turn(4)).rejects.toMatchObject(refused);
    // The issuer derives nothing from a custodian: no child token, no renewal.
    await expect(thief.fork('custodied-child')).rejects.toMatchObject({
      code: 'PERMISSION_DENIED',
      message: expect.stringContaining('no fork right'),
    });
    await expect(thief.renew()).rejects.toMatchObject({ code: 'PERMISSION_DENIED', message: expect.stringContaining('custodian') });
    // Given tokens minted elsewhere, the worker refuses the custodian itself.
    const childCapability = cluster.agents.mintChildCapability(owner.capability, 'custodied-child');
    await expect(thief.fork('custodied-child', childCapability)).rejects.toMatchObject(refused);
    await expect(thief.release()).rejects.toMatchObject(refused);
    const next = cluster.agents.mintRenewal(owner.capability);
    await expect(thief.renew(next, { nextCustodian: cluster.agents.mintCustodian(next) })).rejects.toMatchObject(refused);
    await expect(cluster.agents.agent('custodied-child', carried).status()).rejects.toMatchObject({ code: 'STALE_HANDLE' });
    expect(await owner.status()).toMatchObject({ tokens: 16, turns: 1, denials: 5, phase: expect.not.stringMatching('released') });
    const audited = auditLines().filter((line) => line.agent === 'custodied');
    expect(audited.map((line) => [line.action, line.reason])).toEqual(
      ['resume', 'turn', 'fork', 'release', 'renew'].map((action) => [action, 'custodian-token']),
    );
    expect(JSON.stringify(audited)).not.toContain(carried.split('.')[2]!);

    // The idle timer demotes with the custodian alone.
    await eventually(async () => ((await owner.status()).phase === 'warm' ? true : undefined), 15_000, 'warm on the idle timer');
    expect(await owner.status()).toMatchObject({ tier: 'host' });

    // Failover: the holder leaves; the next call's workflow adopts the context on the survivor and pins it
    // again there, with the custodian; the turn itself acts with the owner's token.
    expect(await owner.pin()).toMatchObject({ pinned: true, tier: 'device' });
    // One worker per task queue and process: the survivor starts once the holder is gone.
    cluster.workers[0]!.shutdown();
    await cluster.runs[0];
    const survivor = await cluster.startWorker();
    expect(await owner.turn(4)).toMatchObject({ tokens: 20, turns: 2 });
    expect(await owner.status()).toMatchObject({ holder: survivor.holder, pinned: true, tokens: 20, turns: 2, failovers: 1 });
    expect(survivor.memory.snapshot('custodied').pinned).toBe(true);
    await owner.release();
    await expect(cluster.agents.agent('custodied', carried).resume()).rejects.toMatchObject({ code: 'INVALID_STATE' });
  });
});

/** The token an agent's workflow carries, as whoever holds the codec keys reads it in the decoded history. */
async function carriedToken(agentId: string): Promise<string> {
  const history = await cluster.client.workflow.getHandle(agentWorkflowId(agentId)).fetchHistory();
  const payloads = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads ?? [];
  const [input] = await cluster.client.options.loadedDataConverter.payloadCodecs[0]!.decode(payloads);
  return (JSON.parse(Buffer.from(input!.data!).toString()) as AgentInput).capability;
}

/** Every worker's audit log of denials. */
function auditLines(): Array<Record<string, unknown>> {
  const dir = join(cluster.tierDir, 'audit');
  return readdirSync(dir).flatMap((file) =>
    readFileSync(join(dir, file), 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>),
  );
}
