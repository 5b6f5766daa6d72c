// The Temporal dev server restarted under active agents. The server keeps its history in a SQLite file;
// it is stopped (SIGTERM, then SIGKILL in the second test) and started again on the same file and port.
// The worker's pollers and the client reconnect on their own (the SDK retries); the agents go on with more
// turns, a suspend to disk, a verified resume and a release, byte-exact, leaving nothing behind.
import { afterAll, beforeAll, expect, it } from 'vitest';

import type { GpuWorker } from '../../src/worker/gpu-worker';
import { TEST_AGENT_CONFIG, TINY, expectedDigest, startCluster, type TestCluster } from '../temporal/harness';
import { BASELINE, contextFiles, poolBaseline } from './fault-checks';

let cluster: TestCluster;
let worker: GpuWorker;

beforeAll(async () => {
  cluster = await startCluster({ persistent: true });
  worker = await cluster.startWorker();
});
afterAll(async () => cluster?.close());

for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
  it(`agents continue after the dev server is stopped with ${signal} and restarted on the same database`, async () => {
    const ids = [`steady-${signal}`, `forked-${signal}`];
    const [steady, parent] = await Promise.all(
      ids.map((agentId) => cluster.agents.start({ agentId, tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG })),
    );
    await Promise.all([steady!.turn(40), parent!.turn(24)]);
    await steady!.turn(8);
    const { child } = await parent!.fork(`child-${signal}`);
    await child.turn(3);

    await cluster.restartServer(signal);

    // Each call is the first after the restart for its agent: the update waits out the reconnection.
    expect(await steady!.turn(5)).toMatchObject({ tokens: 53, turns: 3 });
    expect(await steady!.status()).toMatchObject({ tokens: 53, turns: 3, tier: 'device' });
    expect(await child.turn(4)).toMatchObject({ tokens: 31 });
    expect(await steady!.suspend('disk')).toMatchObject({ phase: 'cold', tier: 'disk' });
    const resumed = await steady!.resume();
    expect(resumed).toMatchObject({ phase: 'resumed', tier: 'device', tokens: 53, failovers: 0 });
    expect(resumed.lastResume).toMatchObject({ from: 'disk' });
    expect(resumed.digest).toBe(
      expectedDigest([
        [ids[0]!, 0, 40],
        [ids[0]!, 1, 8],
        [ids[0]!, 2, 5],
      ]),
    );
    expect((await child.status()).digest).toBe(
      expectedDigest([
        [ids[1]!, 0, 24],
        [`child-${signal}`, 0, 3],
        [`child-${signal}`, 1, 4],
      ]),
    );

    await Promise.all([steady!.release(), child.release()]);
    await parent!.release();
    expect(poolBaseline(worker)).toEqual(BASELINE);
    expect(contextFiles(cluster.tierDir)).toEqual([]);
  });
}
