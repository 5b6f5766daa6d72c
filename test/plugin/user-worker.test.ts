// kvfabric used from a user's own worker: a worker that runs the user's support-ticket workflow and
// activities is created with kvfabric's worker plugin (and the user's client with the client plugin),
// and agents work there as on kvfabric's own worker: a ticket starts an agent as a child workflow and
// takes turns with it, the agent suspends and resumes, survives its holder being killed (another user
// worker adopts it from the cold tier), and refuses a wrong capability; a user worker running the real
// model (SmolLM2-135M) answers a message.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';

import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { agentConfig, type AgentClient } from '../../src/client/agent-client';
import { FabricError } from '../../src/fabric/errors';
import { KvFabricClientPlugin, KvFabricWorkerPlugin } from '../../src/plugin';
import { CapabilityIssuer } from '../../src/security/capability-issuer';
import { CodecKeyRing, ENCRYPTED_ENCODING } from '../../src/security/payload-codec';
import type { AgentInput } from '../../src/workflows/definitions';
import { TEST_AGENT_CONFIG, TINY, startCluster, type TestCluster } from '../temporal/harness';
import { TEST_CODEC_KEYS, TEST_SIGNING_KEYS } from '../security/test-keys';
import type { supportTicket } from './fixtures/support-workflows';
import { createUserWorker, type UserWorker } from './fixtures/user-worker';

let cluster: TestCluster;
let connection: Connection;
let workerConnection: NativeConnection;
let client: Client;
let agents: AgentClient;
const userWorkers: UserWorker[] = [];
const runs: Promise<void>[] = [];
const security = { codec: new CodecKeyRing(TEST_CODEC_KEYS), issuer: new CapabilityIssuer(TEST_SIGNING_KEYS) };

beforeAll(async () => {
  cluster = await startCluster();
  connection = await Connection.connect({ address: cluster.server.address });
  const plugin = new KvFabricClientPlugin(security);
  client = new Client({ connection, plugins: [plugin] });
  agents = plugin.agents(client, cluster.taskQueue);
  workerConnection = await NativeConnection.connect({ address: cluster.server.address });
});

afterAll(async () => {
  for (const { worker } of userWorkers) if (worker.getState() === 'RUNNING') worker.shutdown();
  await Promise.allSettled(runs);
  for (const user of userWorkers) await user.close();
  await workerConnection?.close();
  await connection?.close();
  await cluster?.close();
});

async function startUserWorker(workerId: string, taskQueue = cluster.taskQueue): Promise<UserWorker> {
  const config = cluster.workerConfig({ workerId });
  const user = await createUserWorker({
    address: cluster.server.address,
    taskQueue,
    kvfabric: config,
    security,
    connection: workerConnection,
  });
  userWorkers.push(user);
  runs.push(user.worker.run());
  return user;
}

function ticket(id: string, input: Parameters<typeof supportTicket>[0], taskQueue = cluster.taskQueue) {
  return client.workflow.execute<typeof supportTicket>('supportTicket', { taskQueue, workflowId: `ticket-${id}`, args: [input] });
}

it("runs a user's workflow that starts an agent and talks to it, on a worker made with the plugin, through suspend, resume, failover and a denial", async () => {
  // The first user worker runs as a process of its own, so its kill is real.
  const doomed = await cluster.spawnWorker({ workerId: 'user-a', entry: join(__dirname, 'fixtures', 'user-worker-main.ts') });
  const capability = agents.mintCapability('helper', 'acme');
  const newAgent: AgentInput = {
    agentId: 'helper',
    tenant: 'acme',
    capability: agents.mintCustodian(capability),
    model: TINY,
    config: agentConfig(TEST_AGENT_CONFIG),
  };

  // The user's ticket starts the agent as its child and asks it two questions.
  const answers = await ticket('1', { newAgent, agentId: 'helper', capability, questions: [40, 8] });
  expect(answers).toEqual([
    { holder: doomed.holder, tokens: 40, turns: 1 },
    { holder: doomed.holder, tokens: 48, turns: 2 },
  ]);
  const helper = agents.agent('helper', capability);
  expect(await helper.status()).toMatchObject({ phase: 'idle', tier: 'device', tokens: 48, turns: 2, holder: doomed.holder });

  // The ticket's history is sealed by the plugins' codec, the user's workflow's input as well as the agent's.
  const started = (await cluster.rawClient.workflow.getHandle('ticket-1').fetchHistory()).events![0]!
    .workflowExecutionStartedEventAttributes!;
  expect(Buffer.from(started.input!.payloads![0]!.metadata!.encoding!).toString()).toBe(ENCRYPTED_ENCODING);

  // Suspend and resume, through the client made with the client plugin.
  expect(await helper.suspend('host')).toMatchObject({ phase: 'warm', tier: 'host', holder: doomed.holder });
  expect(await helper.resume()).toMatchObject({ phase: 'resumed', tier: 'device', tokens: 48, holder: doomed.holder });

  // A wrong capability (another agent's, same tenant) is refused by the plugin's activities.
  const other = agents.mintCapability('stranger', 'acme');
  const denied = await agents
    .agent('helper', other)
    .turn(1)
    .catch((err: unknown) => err);
  expect(denied).toBeInstanceOf(FabricError);
  expect(denied).toMatchObject({ code: 'PERMISSION_DENIED' });

  // The holder dies; a second user worker, in this process, adopts the agent from the cold tier, and the
  // user's next ticket runs there too.
  const survivor = await startUserWorker('user-b');
  doomed.child.kill('SIGKILL');
  expect(await doomed.exited).toBe('SIGKILL');
  expect(await helper.turn(5)).toMatchObject({ tokens: 53, turns: 3 });
  const afterKill = await helper.status();
  expect(afterKill).toMatchObject({ holder: survivor.plugin.holder, tokens: 53, turns: 3, failovers: 1, denials: 1 });
  expect(afterKill.lastResume).toMatchObject({ from: 'disk' });
  expect(await ticket('2', { agentId: 'helper', capability, questions: [7] })).toEqual([
    { holder: survivor.plugin.holder, tokens: 60, turns: 4 },
  ]);
  expect(survivor.plugin.memory.heldContextIds()).toContain('helper');

  await helper.release();
}, 120_000);

it('drains the agents a user worker holds to the cold tier when that worker shuts down', async () => {
  // A queue of its own, so no worker of the previous test takes this agent's placement.
  const queue = `drain-${randomBytes(3).toString('hex')}`;
  const leaving = await startUserWorker('user-c', queue);
  const capability = agents.mintCapability('drained', 'acme');
  const newAgent: AgentInput = {
    agentId: 'drained',
    tenant: 'acme',
    capability: agents.mintCustodian(capability),
    model: TINY,
    config: agentConfig({ ...TEST_AGENT_CONFIG, durability: 'on-offload' }),
  };
  expect(await ticket('3', { newAgent, agentId: 'drained', capability, questions: [12] }, queue)).toEqual([
    { holder: leaving.plugin.holder, tokens: 12, turns: 1 },
  ]);
  leaving.worker.shutdown();
  await runs.at(-1);
  expect(leaving.plugin.drained).toMatchObject({ contexts: 1, failed: [] });
  expect(leaving.plugin.drained!.bytes).toBeGreaterThan(0);
}, 60_000);

it('stops cleanly when shut down before it polls: nothing runs, nothing is left holding the connection', async () => {
  const config = cluster.workerConfig({ workerId: 'user-early' });
  const user = await createUserWorker({
    address: cluster.server.address,
    taskQueue: `early-${randomBytes(3).toString('hex')}`,
    kvfabric: config,
    security,
    connection: workerConnection,
  });
  userWorkers.push(user);
  user.plugin.shutdown(); // while run() has yet to create the holder's Worker
  await user.worker.run();
  expect(user.worker.getState()).toBe('STOPPED');
  expect(user.plugin.drained).toEqual({ contexts: 0, bytes: 0, failed: [], written: [] });
});

it('runs a real model turn (SmolLM2-135M through llama.cpp) on a user worker made with the plugin', async () => {
  const queue = `llama-${randomBytes(3).toString('hex')}`;
  const user = await cluster.spawnWorker({
    workerId: 'user-llama',
    taskQueue: queue,
    entry: join(__dirname, 'fixtures', 'user-worker-main.ts'),
    args: ['--engine', 'llama', '--model', 'smollm2-135m', '--context-length', '512'],
  });
  const timeouts = { ...TEST_AGENT_CONFIG.timeouts!, attemptMs: 120_000, operationMs: 240_000 };
  const agent = await new KvFabricClientPlugin(security)
    .agents(client, queue)
    .start({ agentId: 'talker', tenant: 'acme', model: 'smollm2-135m', config: { ...TEST_AGENT_CONFIG, timeouts } });
  const outcome = await agent.turn({ message: 'My name is Ada and I design bridges.', generation: { maxTokens: 12 } });
  expect(outcome).toMatchObject({ turns: 1, tokens: expect.any(Number) });
  expect(await agent.status()).toMatchObject({ holder: user.holder, turns: 1, tokens: outcome.tokens });
  expect(outcome.reply!.reply.length).toBeGreaterThan(0);
  expect(outcome.reply!.replyTokens).toBeGreaterThan(0);
  await agent.release();
}, 180_000);

it('frees its memory on close() when the worker it configured is never created', async () => {
  const plugin = new KvFabricWorkerPlugin(cluster.workerConfig({ workerId: 'user-failed' }));
  const failsAfter = {
    name: 'fails-after-kvfabric',
    configureWorker: (): never => {
      throw new Error('a later plugin fails');
    },
  };
  await expect(
    Worker.create({ connection: workerConnection, taskQueue: `failed-${randomBytes(3).toString('hex')}`, plugins: [plugin, failsAfter] }),
  ).rejects.toThrow(/a later plugin fails/);
  expect(plugin.memory.stats().contexts).toBe(0);
  await plugin.close();
  expect(() => plugin.memory.stats()).toThrow();
});
