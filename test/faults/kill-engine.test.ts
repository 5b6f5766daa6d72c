// SIGKILL of a llama worker in the two moments a model turn's KV is outside both the engine and the pages'
// durable copy: during the save of a turn's KV (the write-behind after the reply, so the workflow holds
// the turn's token ids and the pages do not hold its KV), and during the load of a stored context into the
// engine (a resume). The doomed worker runs behind fixtures/pausing-worker.ts, which stops it inside the
// save or the load (fixtures/pause-in-engine.ts) so the kill lands there every run. Either way the
// conversation goes on on another worker with exactly the replies of an uninterrupted run (greedy).
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { AgentHandle } from '../../src/client/agent-client';
import { TEST_AGENT_CONFIG, eventually, startCluster, type TestCluster, type WorkerProcess } from '../temporal/harness';

const PAUSING_WORKER = join(__dirname, 'fixtures', 'pausing-worker.ts');
const MODEL = 'smollm2-135m';
const LLAMA_WORKER = ['--no-workflows', '--engine', 'llama', '--model', MODEL, '--context-length', '512'];
const GENERATION = { maxTokens: 16 };
const CONVERSATION = ['My name is Ada and I design bridges.', 'What do I design?', 'And what is my name?'];
/** Model turns take seconds on two cores; a failover adds the holder-loss timeout. */
const TURN_CONFIG = { ...TEST_AGENT_CONFIG, timeouts: { ...TEST_AGENT_CONFIG.timeouts!, attemptMs: 120_000, operationMs: 240_000 } };

let cluster: TestCluster;
let flags: string;
let uninterrupted: string[];

beforeAll(async () => {
  cluster = await startCluster();
  flags = mkdtempSync(join(tmpdir(), 'kvfabric-engine-pause-'));
  await cluster.startWorkflowWorker();
});
afterAll(async () => {
  await cluster?.close();
  rmSync(flags, { recursive: true, force: true });
});

function start(agentId: string, tenant = 'acme'): Promise<AgentHandle> {
  return cluster.agents.start({ agentId, tenant, model: MODEL, config: TURN_CONFIG });
}

async function say(agent: AgentHandle, message: string): Promise<string> {
  return (await agent.say(message, GENERATION)).reply;
}

/** A llama worker that stops inside the engine's `where` (after `skip` such calls) and writes `flag` there. */
function doomedWorker(workerId: string, where: 'save' | 'load', flag: string, skip = 0): Promise<WorkerProcess> {
  return cluster.spawnWorker({
    workerId,
    args: LLAMA_WORKER,
    env: { KVFABRIC_TEST_PAUSE_ENGINE: where, KVFABRIC_TEST_PAUSE_FLAG: flag, KVFABRIC_TEST_PAUSE_SKIP: String(skip) },
    entry: PAUSING_WORKER,
  });
}

async function killOnceStopped(worker: WorkerProcess, flag: string, what: string): Promise<void> {
  await eventually(async () => (existsSync(flag) ? true : undefined), 120_000, `the worker to stop ${what}`);
  worker.child.kill('SIGKILL');
  expect(await worker.exited).toBe('SIGKILL');
}

describe('a llama worker killed', () => {
  it("during a turn's write-behind save: the next turn, on another worker, evaluates the lost turn again from its token ids", async () => {
    const flag = join(flags, 'save.paused');
    // Two saves go through: the first turn's prompt blocks (published for the tenant's next agents:
    // src/prefix-sharing) and that turn's write-behind; the second turn's write-behind stops.
    const doomed = await doomedWorker('llama-save-doomed', 'save', flag, 2);
    const agent = await start('killed-in-save');
    const replies = [await say(agent, CONVERSATION[0]!)];
    // The reply comes back before the save: the workflow has the turn's ids, the pages never get its KV.
    replies.push(await say(agent, CONVERSATION[1]!));
    await killOnceStopped(doomed, flag, "in the second turn's save");

    const survivor = await cluster.spawnWorker({ workerId: 'llama-after-save', args: LLAMA_WORKER });
    replies.push(await say(agent, CONVERSATION[2]!));
    const status = await agent.status();
    expect(status).toMatchObject({ holder: survivor.holder, failovers: 1, turns: 3 });

    uninterrupted = [];
    const fresh = await start('uninterrupted');
    for (const message of CONVERSATION) uninterrupted.push(await say(fresh, message));
    await fresh.release();
    console.log(`[kill-engine] replies after a kill mid-save: ${JSON.stringify(replies)}`);
    expect(replies).toEqual(uninterrupted);
    await agent.release();
    // The next scenario's agent must land on its own doomed worker.
    survivor.child.kill('SIGTERM');
    expect(await survivor.exited).toBe(0);
  });

  it('during the load of a stored context (a resume): the resume completes on another worker and the conversation goes on exactly', async () => {
    const flag = join(flags, 'load.paused');
    const doomed = await doomedWorker('llama-load-doomed', 'load', flag);
    // Another tenant: acme's agents above published this first message's prefix, whose adoption from the
    // cold tier would be the first load, in the first turn, instead of the resume's.
    const agent = await start('killed-in-load', 'globex');
    const replies = [await say(agent, CONVERSATION[0]!)];
    expect(await agent.suspend('disk')).toMatchObject({ tier: 'disk', holder: doomed.holder });
    const resumed = agent.resume();
    resumed.catch(() => undefined); // awaited below; not unhandled while the worker dies
    await killOnceStopped(doomed, flag, 'in the load');

    const survivor = await cluster.spawnWorker({ workerId: 'llama-after-load', args: LLAMA_WORKER });
    expect(await resumed).toMatchObject({ holder: survivor.holder, tier: 'device', failovers: 1 });
    for (const message of CONVERSATION.slice(1)) replies.push(await say(agent, message));
    console.log(`[kill-engine] replies after a kill mid-load: ${JSON.stringify(replies)}`);
    expect(replies).toEqual(uninterrupted);
    await agent.release();
  });
});
