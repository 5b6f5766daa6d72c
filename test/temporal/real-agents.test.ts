// Real agents on a real dev server: SmolLM2-135M-Instruct (llama.cpp through node-llama-cpp, on the CPU)
// runs every turn, and its KV cache lives in kvfabric. A conversation suspended to disk, its worker
// killed with SIGKILL and resumed by another worker process continues with exactly the tokens an
// uninterrupted run produces (greedy decoding); so do a restore from host memory and a fork. Workers are
// real child processes, the model is the one set-up caches.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { AgentHandle } from '../../src/client/agent-client';
import { TEST_AGENT_CONFIG, decodedPayloadsOf, everythingIn, startCluster, type TestCluster, type WorkerProcess } from './harness';

const MODEL = 'smollm2-135m';
const CONTEXT_LENGTH = 512;
const LLAMA_WORKER = ['--no-workflows', '--engine', 'llama', '--model', MODEL, '--context-length', String(CONTEXT_LENGTH)];
const GENERATION = { maxTokens: 24 };
const CONVERSATION = ['My name is Ada and I design bridges.', 'What do I design?', 'And what is my name?'];
/** Model turns take seconds on two cores; a failover adds the holder-loss timeout. */
const TURN_CONFIG = { ...TEST_AGENT_CONFIG, timeouts: { ...TEST_AGENT_CONFIG.timeouts!, attemptMs: 120_000, operationMs: 240_000 } };

let cluster: TestCluster;
let worker: WorkerProcess;

beforeAll(async () => {
  cluster = await startCluster();
  await cluster.startWorkflowWorker();
});
afterAll(async () => cluster?.close());

function start(agentId: string, durability: 'every-turn' | 'on-offload' = 'every-turn'): Promise<AgentHandle> {
  return cluster.agents.start({ agentId, tenant: 'acme', model: MODEL, config: { ...TURN_CONFIG, durability } });
}

/** The replies of a fresh agent that says `messages` in order: the uninterrupted run. */
async function freshReplies(agentId: string, messages: string[]): Promise<string[]> {
  const agent = await start(agentId);
  const replies: string[] = [];
  for (const message of messages) replies.push((await agent.say(message, GENERATION)).reply);
  await agent.release();
  return replies;
}

describe('real agents (SmolLM2-135M through llama.cpp)', () => {
  it('continue exactly after a suspend to disk, a SIGKILL and a resume on another worker process', async () => {
    const doomed = await cluster.spawnWorker({ workerId: 'llama-doomed', args: LLAMA_WORKER });
    const agent = await start('ada');
    const replies: string[] = [];
    for (const message of CONVERSATION.slice(0, 2)) replies.push((await agent.say(message, GENERATION)).reply);
    expect(await agent.suspend('disk')).toMatchObject({ tier: 'disk', holder: doomed.holder });
    doomed.child.kill('SIGKILL');
    expect(await doomed.exited).toBe('SIGKILL');

    worker = await cluster.spawnWorker({ workerId: 'llama-survivor', args: LLAMA_WORKER });
    const resumed = await agent.resume();
    expect(resumed).toMatchObject({ holder: worker.holder, tier: 'device', failovers: 1, lastResume: { from: 'disk' } });
    const last = await agent.say(CONVERSATION[2]!, GENERATION);
    replies.push(last.reply);

    const uninterrupted = await freshReplies('ada-uninterrupted', CONVERSATION);
    console.log(`[real-agents] replies after SIGKILL and resume: ${JSON.stringify(replies)}`);
    expect(replies).toEqual(uninterrupted);
    expect(last.replyTokens).toBeGreaterThan(0);
    await agent.release();
  });

  it('continue exactly after a suspend to host memory', async () => {
    const agent = await start('host-sleeper');
    const replies = [(await agent.say(CONVERSATION[0]!, GENERATION)).reply];
    expect(await agent.suspend('host')).toMatchObject({ tier: 'host' });
    expect(await agent.resume()).toMatchObject({ tier: 'device', lastResume: { from: 'host' } });
    replies.push((await agent.say(CONVERSATION[1]!, GENERATION)).reply);
    expect(replies).toEqual(await freshReplies('host-sleeper-uninterrupted', CONVERSATION.slice(0, 2)));
    await agent.release();
  });

  it('keep the conversation sealed in the history: ciphertext without the codec keys, the words with them', async () => {
    const agent = await start('sealed');
    const message = 'The password for the site office is periwinkle.';
    const { reply } = await agent.say(message, GENERATION);
    expect(reply.length).toBeGreaterThan(10);
    const raw = await everythingIn(cluster.rawClient, 'sealed');
    expect(raw).not.toContain('periwinkle');
    expect(raw).not.toContain(reply.slice(0, 16));
    const decoded = await decodedPayloadsOf(cluster.client, 'sealed');
    expect(decoded).toContain(message);
    expect(decoded).toContain(JSON.stringify(reply).slice(1, 17));
    await agent.release();
  });

  it('fork: parent and child share the prefix pages and each continues as a fresh run over that prefix would', async () => {
    const parent = await start('parent');
    await parent.say(CONVERSATION[0]!, GENERATION);
    const { child, status } = await parent.fork('child');
    expect(status.sharedBlocks).toBeGreaterThan(0);
    const parentReply = (await parent.say('What do I design?', GENERATION)).reply;
    const childReply = (await child.say('What is my name?', GENERATION)).reply;
    expect([parentReply]).toEqual((await freshReplies('parent-alone', [CONVERSATION[0]!, 'What do I design?'])).slice(1));
    expect([childReply]).toEqual((await freshReplies('child-alone', [CONVERSATION[0]!, 'What is my name?'])).slice(1));
    await child.release();
    await parent.release();
  });

  it('refuses a turn past the context length (OUT_OF_RANGE) and a token-count turn (INVALID_ARGUMENT), changing nothing', async () => {
    const agent = await start('overflow');
    await agent.say(CONVERSATION[0]!, GENERATION);
    const before = await agent.status();
    await expect(agent.say('bridge '.repeat(CONTEXT_LENGTH), GENERATION)).rejects.toMatchObject({ code: 'OUT_OF_RANGE' });
    await expect(agent.turn(16)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    const after = await agent.status();
    expect(after).toMatchObject({ tokens: before.tokens, digest: before.digest, turns: before.turns });
    // ...and the agent goes on as if nothing happened.
    const next = (await agent.say(CONVERSATION[1]!, GENERATION)).reply;
    expect(next).toBe((await freshReplies('overflow-uninterrupted', CONVERSATION.slice(0, 2)))[1]);
    await agent.release();
  });

  it('a worker stopped with SIGTERM drains its contexts before it exits, and another worker continues exactly', async () => {
    // No durable copy per turn: only the drain can save this context.
    const agent = await start('drained', 'on-offload');
    const replies = [(await agent.say(CONVERSATION[0]!, GENERATION)).reply];
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toBe(0);
    expect(worker.output()).toMatch(/drained[\s\S]*contexts: 1,/);
    await cluster.spawnWorker({ workerId: 'llama-next', args: LLAMA_WORKER });
    replies.push((await agent.say(CONVERSATION[1]!, GENERATION)).reply);
    expect(replies).toEqual(await freshReplies('drained-uninterrupted', CONVERSATION.slice(0, 2)));
    await agent.release();
  });
});
