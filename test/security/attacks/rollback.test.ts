// Attack class: rollback. Someone with write access to the shared tier directory puts back an older,
// authentic manifest of a context (and its segments are still there), hoping that the next worker to
// adopt the context takes the old conversation for the current one. The agent's workflow keeps the newest
// durable-copy version it saw and passes it to the failover's recover: the older manifest is refused as
// INTEGRITY before any of its bytes are used. First through the activities on two workers' memories over
// one directory, then end to end: a real failover on the dev server after the holder was killed.
import { copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import type { TurnRequest } from '../../../src/activities';
import { emptyDigest, type DigestState } from '../../../src/agent-memory/context-digest';
import { MODELS } from '../../../src/engines/models';
import { TEST_AGENT_CONFIG, TINY, startCluster, type TestCluster } from '../../temporal/harness';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { activitiesOf, as, workflowOf } from './activity-fixture';

const manifestOf = (coldRoot: string, contextId: string) => join(coldRoot, 'manifests', `${contextId}.manifest`);
/** A manifest's log records (src/tiers/cold/manifest-log-store.ts): an older manifest is its base without the records after it. */
const logOf = (coldRoot: string) => join(coldRoot, 'manifest-log');
/** Puts back the older manifest: its base, and none of the log records written since. */
function putBack(stale: string, coldRoot: string, contextId: string): void {
  copyFileSync(stale, manifestOf(coldRoot, contextId));
  rmSync(logOf(coldRoot), { recursive: true, force: true });
}

describe('attack: an older manifest put back before a failover', () => {
  const opened: MemoryFixture[] = [];
  let dir: string;
  afterAll(async () => {
    for (const fx of opened) await fx.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the adopting worker refuses it with INTEGRITY before adopting anything; the newest copy is adopted', async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvfabric-attack-rollback-'));
    const holder = await openMemory(dir);
    opened.push(holder);
    const token = holder.token('agent');
    const activities = activitiesOf(holder);
    const run = workflowOf('agent');
    const turn = (n: number, before: DigestState): TurnRequest => ({
      agentId: 'agent',
      tenant: 'acme',
      capability: token,
      operationId: `agent:${n}`,
      turn: n,
      tokens: 24,
      before,
      checkpoint: true,
    });
    await as(run, () =>
      activities.placement.allocate({
        agentId: 'agent',
        tenant: 'acme',
        capability: token,
        operationId: 'agent:0',
        shape: MODELS.tiny!.shape,
        tokensPerBlock: 16,
        checkpoint: true,
      }),
    );
    const first = await as(run, () => activities.holder.turn(turn(1, emptyDigest())));
    const stale = `${dir}/stale.manifest`;
    copyFileSync(manifestOf(join(dir, 'cold'), 'agent'), stale);
    const second = await as(run, () => activities.holder.turn(turn(2, first.digest)));
    // What the workflow records: the newest durable-copy version any result reported.
    expect(second.durableVersion).toBeGreaterThan(first.durableVersion);

    // The holder dies; the attacker puts the older manifest back.
    const newest = `${dir}/newest.manifest`;
    copyFileSync(manifestOf(join(dir, 'cold'), 'agent'), newest);
    cpSync(logOf(join(dir, 'cold')), `${dir}/newest-log`, { recursive: true });
    putBack(stale, join(dir, 'cold'), 'agent');
    const adopter = await openMemory(dir);
    opened.push(adopter);
    const calls = adopter.tierCalls.length;
    const recover = (minVersion: number) =>
      as({ ...run, attempt: 1 }, () =>
        activitiesOf(adopter).placement.recover({
          agentId: 'agent',
          tenant: 'acme',
          capability: token,
          operationId: `agent:${minVersion + 10}`,
          epoch: 1,
          minVersion,
        }),
      );
    await expect(recover(second.durableVersion)).rejects.toMatchObject({
      type: 'INTEGRITY',
      message: expect.stringContaining(`older than the expected ${second.durableVersion}`),
    });
    expect(adopter.tierCalls.slice(calls).filter((name) => name !== 'has')).toEqual([]); // nothing adopted, no page read
    expect(adopter.memory.holds('agent')).toBe(false);
    expect(readFileSync(adopter.auditFile, 'utf8')).toContain('"reason":"stale-manifest"');

    // The newest manifest back in place: adopted, and it holds both turns.
    copyFileSync(newest, manifestOf(join(dir, 'cold'), 'agent'));
    cpSync(`${dir}/newest-log`, logOf(join(dir, 'cold')), { recursive: true });
    await recover(second.durableVersion);
    expect(adopter.memory.snapshot('agent')).toMatchObject({ tokens: 48, durableVersion: second.durableVersion });
  });
});

describe('attack: rollback before a failover, on a real dev server', () => {
  let cluster: TestCluster | undefined;
  afterAll(async () => cluster?.close());

  it("the agent's next turn fails with INTEGRITY naming the stale version; no worker adopts the old copy", async () => {
    cluster = await startCluster();
    await cluster.startWorkflowWorker();
    const doomed = await cluster.spawnWorker({ workerId: 'doomed', args: ['--no-workflows'] });
    const agent = await cluster.agents.start({ agentId: 'rolled', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    await agent.turn(40);
    const manifest = manifestOf(join(cluster.tierDir, 'cold'), 'rolled');
    const stale = `${cluster.tierDir}/stale.manifest`;
    copyFileSync(manifest, stale);
    expect(await agent.turn(8)).toMatchObject({ tokens: 48, turns: 2 });
    expect(await agent.status()).toMatchObject({ holder: doomed.holder, tokens: 48 });

    const survivor = await cluster.startWorker({ config: { workflows: false } });
    doomed.child.kill('SIGKILL');
    expect(await doomed.exited).toBe('SIGKILL');
    putBack(stale, join(cluster.tierDir, 'cold'), 'rolled');

    await expect(agent.turn(5)).rejects.toMatchObject({ code: 'INTEGRITY', message: expect.stringContaining('stale or replayed') });
    expect(survivor.memory.holds('rolled')).toBe(false);
  });
});
