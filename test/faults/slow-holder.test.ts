// A holder that is slow, not dead: frozen with SIGSTOP in the middle of a turn's checkpoint (after its
// segment, before its manifest), it is taken for lost, and its agent fails over to another worker that
// goes on taking turns. Woken with SIGCONT, the old holder finishes the interrupted checkpoint: its fence
// check (src/shared-directory/holder-fences.ts) must stop it from writing its older manifest over the new
// holder's, and it must drop its copy. Nothing is lost, and nothing is left.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';

import { afterAll, beforeAll, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { ColdStore, KeyRing } from '../../src/tiers/cold';
import { parseKeyList } from '../../src/security/key-list';
import { TEST_AGENT_CONFIG, TINY, eventually, expectedDigest, startCluster, type TestCluster } from '../temporal/harness';
import { BASELINE, contextFiles, poolBaseline } from './fault-checks';

const PAUSING_WORKER = join(__dirname, 'fixtures', 'pausing-worker.ts');

let cluster: TestCluster;
let scratch: string;

beforeAll(async () => {
  cluster = await startCluster();
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-slow-'));
});
afterAll(async () => {
  await cluster?.close();
  rmSync(scratch, { recursive: true, force: true });
});

it('a holder frozen mid-checkpoint and woken after a failover cannot overwrite the newer manifest, and drops its copy', async () => {
  const id = 'slow-holder';
  const queue = `slow-${randomBytes(3).toString('hex')}`;
  const flag = join(scratch, 'paused');
  const tierDir = join(scratch, 'tier');
  const agents = new AgentClient(cluster.client, queue, cluster.agents.security);
  await cluster.startWorkflowWorker(queue);
  const slow = await cluster.spawnWorker({
    workerId: 'slow',
    taskQueue: queue,
    args: ['--no-workflows', '--tier-dir', tierDir, '--housekeeping-ms', '250', '--shutdown-grace-ms', '1000'],
    env: {
      KVFABRIC_TEST_PAUSE_IN: 'turn',
      KVFABRIC_TEST_PAUSE_FLAG: flag,
      KVFABRIC_TEST_PAUSE_SKIP: '1',
      KVFABRIC_TEST_PAUSE_UNTIL_GONE: '1',
    },
    entry: PAUSING_WORKER,
  });
  const agent = await agents.start({ agentId: id, tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  await agent.turn(37);
  const interrupted = agent.turn(20);
  await eventually(async () => (existsSync(flag) ? true : undefined), 30_000, 'the turn to pause after its segment');
  slow.child.kill('SIGSTOP');
  rmSync(flag); // it goes on from there once woken

  const survivor = await cluster.startWorker({ config: { taskQueue: queue, workflows: false, tierDir } });
  expect(await interrupted).toMatchObject({ tokens: 57, turns: 2 });
  expect(await agent.status()).toMatchObject({ holder: survivor.holder, tokens: 57, failovers: 1 });
  const latest = [
    [id, 0, 37],
    [id, 1, 20],
    [id, 2, 11],
  ] as Array<[string, number, number]>;
  expect(await agent.turn(11)).toMatchObject({ tokens: 68, turns: 3 });
  expect(await agent.status()).toMatchObject({ tokens: 68, digest: expectedDigest(latest) });

  slow.child.kill('SIGCONT');
  // The woken worker finishes its checkpoint, is refused by the fence and drops its copy; housekeeping
  // would drop it too. Then it stops with nothing to drain.
  await eventually(
    async () => (/adopted by another worker/.test(slow.output()) ? true : undefined),
    20_000,
    `the woken holder to be fenced:\n${slow.output()}`,
  );
  slow.child.kill('SIGTERM');
  await slow.exited;
  expect(slow.output()).toMatch(/kvfabric GPU worker drained[\s\S]*?contexts: 0/);

  // The manifest on disk is still the new holder's newest: 68 tokens, never the woken holder's 57.
  const cold = await ColdStore.open({
    directory: join(tierDir, 'cold'),
    keyRing: new KeyRing(parseKeyList(cluster.keys, 'test keys'), 'test-key'),
  });
  expect(await cold.readManifest(id)).toMatchObject({ tokens: 68 });
  await cold.close();
  expect(await agent.suspend('disk')).toMatchObject({ tier: 'disk' });
  expect(await agent.resume()).toMatchObject({ tokens: 68, digest: expectedDigest(latest), lastResume: { from: expect.any(String) } });
  await agent.release();
  expect(poolBaseline(survivor)).toEqual(BASELINE);
  expect(contextFiles(tierDir)).toEqual([]);
}, 120_000); // a failover waits out the frozen holder's activity timeout: 23-36 s alone, more beside the whole suite on two cores
