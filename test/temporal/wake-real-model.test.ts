// A planned wake-up with the real model on a dev server: SmolLM2-135M (llama.cpp through node-llama-cpp, on
// the CPU) in a worker process. A conversation is suspended to disk, its owner plans the wake-up through
// the client API (AgentHandle.wake, with the custodian the start minted), and the agent's workflow brings
// the context back from disk into the engine before the planned instant, on its own. The turn at the
// instant then continues with exactly the tokens of a conversation that never paused (greedy decoding,
// each turn evaluated in the same passes as the uninterrupted run's), and restores nothing on its path.
import { setTimeout as sleep } from 'node:timers/promises';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { AgentHandle } from '../../src/client/agent-client';
import type { AgentStatus } from '../../src/workflows/definitions';
import { WAKE_LEAD_FLOOR_MS } from '../../src/workflows/lead-time';
import { TEST_AGENT_CONFIG, startCluster, type TestCluster } from './harness';

const MODEL = 'smollm2-135m';
const LLAMA_WORKER = ['--no-workflows', '--engine', 'llama', '--model', MODEL, '--context-length', '512'];
const GENERATION = { maxTokens: 24 };
const CONVERSATION = ['My name is Ada and I design bridges.', 'What do I design?', 'And what is my name?'];
/** Model turns take seconds on two cores. */
const TURN_CONFIG = { ...TEST_AGENT_CONFIG, timeouts: { ...TEST_AGENT_CONFIG.timeouts!, attemptMs: 120_000, operationMs: 240_000 } };
/**
 * From the plan to the wake-up: the prefetch starts one lead time (the 2 s floor for a context this small)
 * before it, and the plan must first be seen on disk, so a few seconds more than the floor.
 */
const PAUSE_MS = WAKE_LEAD_FLOOR_MS + 6_000;

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster();
  await cluster.startWorkflowWorker();
  await cluster.spawnWorker({ workerId: 'llama-waker', args: LLAMA_WORKER });
}, 180_000);
afterAll(async () => cluster?.close());

function start(agentId: string): Promise<AgentHandle> {
  return cluster.agents.start({ agentId, tenant: 'acme', model: MODEL, config: TURN_CONFIG });
}

/** Polls the status until `at`, every 100 ms: the first status on the device and when it was seen, if any. */
async function firstOnDeviceBefore(agent: AgentHandle, at: number): Promise<{ status: AgentStatus; seenAt: number } | undefined> {
  while (Date.now() < at) {
    const status = await agent.status();
    const seenAt = Date.now();
    if (status.tier === 'device' && seenAt <= at) return { status, seenAt };
    await sleep(100);
  }
  return undefined;
}

describe('a planned wake-up with the real model (SmolLM2-135M through llama.cpp)', () => {
  it('brings a conversation suspended to disk back into the engine by the planned instant; the next turn continues token-identical', async () => {
    const agent = await start('wake-ada');
    expect(agent.custodian).toBeDefined(); // start minted it: the owner's means to plan
    const replies: string[] = [];
    for (const message of CONVERSATION.slice(0, 2)) replies.push((await agent.say(message, GENERATION)).reply);
    const suspended = await agent.suspend('disk');
    expect(suspended).toMatchObject({ tier: 'disk' });

    const at = Date.now() + PAUSE_MS;
    const planned = await agent.wake(new Date(at));
    expect(planned).toMatchObject({ tier: 'disk', wake: { at, leadMs: WAKE_LEAD_FLOOR_MS } });

    const woken = await firstOnDeviceBefore(agent, at);
    expect(woken, 'the context was not on the device by the planned instant').toBeDefined();
    // Brought back by the prefetch (from disk, verified and into the engine), not by a caller's call; the plan is spent.
    expect(woken!.status).toMatchObject({ tier: 'device', lastResume: { from: 'disk' }, turns: 2, tokens: suspended.tokens });
    expect(woken!.status.wake).toBeUndefined();
    console.log(
      `[wake-real-model] on the device ${at - woken!.seenAt} ms before the planned instant, ${JSON.stringify(woken!.status.lastResume)}`,
    );

    await sleep(Math.max(0, at - Date.now()));
    const last = await agent.say(CONVERSATION[2]!, GENERATION);
    replies.push(last.reply);
    const after = await agent.status();
    // The turn found the context in the engine: no resume on its path.
    expect(after.lastResume).toEqual(woken!.status.lastResume);
    expect(last.replyTokens).toBeGreaterThan(0);

    const uninterrupted = await start('wake-ada-uninterrupted');
    const expected: string[] = [];
    for (const message of CONVERSATION) expected.push((await uninterrupted.say(message, GENERATION)).reply);
    console.log(`[wake-real-model] replies after the planned wake-up: ${JSON.stringify(replies)}`);
    expect(replies).toEqual(expected);
    expect(after.tokens).toBe((await uninterrupted.status()).tokens);
    await uninterrupted.release();
    await agent.release();
  }, 300_000);
});
