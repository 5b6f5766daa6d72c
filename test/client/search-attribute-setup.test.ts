// A newcomer's namespace has none of kvfabric's search attributes: on a real dev server started without
// them, the first AgentClient.start registers them through the operator service and the agent runs, and
// a listing filtered by them works. A client that may not register them gets INVALID_STATE naming the
// missing attribute and the command that fixes it, and starts nothing. (The dev server has no
// authorizer; the refusal is the one a real authorizer answers, gRPC PERMISSION_DENIED, from the
// client's operator service.)
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client, Connection, type ConnectionLike } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { CapabilityIssuer } from '../../src/security/capability-issuer';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { createGpuWorker, type GpuWorker } from '../../src/worker/gpu-worker';
import { AGENT_SEARCH_ATTRIBUTES } from '../../src/workflows/search-attributes';
import { TEST_AGENT_CONFIG, TEST_DATA_CONVERTER, TINY, installRuntime, testWorkerConfig } from '../temporal/harness';
import { TEST_SIGNING_KEYS } from '../security/test-keys';

let server: DevServer;
let connection: Connection;
let workerConnection: NativeConnection;
let worker: GpuWorker;
let run: Promise<unknown>;
const tierDir = mkdtempSync(join(tmpdir(), 'kvfabric-sa-'));
const taskQueue = `kvfabric-sa-${randomBytes(4).toString('hex')}`;
const issuer = new CapabilityIssuer(TEST_SIGNING_KEYS);

beforeAll(async () => {
  await installRuntime();
  server = await startDevServer({ searchAttributes: [] });
  connection = await Connection.connect({ address: server.address });
  workerConnection = await NativeConnection.connect({ address: server.address });
  worker = await createGpuWorker({
    connection: workerConnection,
    config: testWorkerConfig({
      address: server.address,
      taskQueue,
      tierDir,
      workerId: 'w-sa',
      pool: { deviceBlocks: 64, hostBlocks: 64 },
      maxConcurrentActivities: 4,
    }),
  });
  run = worker.run();
});

afterAll(async () => {
  worker?.shutdown();
  await run?.catch(() => undefined);
  await connection?.close();
  await workerConnection?.close();
  await server?.stop();
  rmSync(tierDir, { recursive: true, force: true });
});

async function registered(): Promise<string[]> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace: 'default' });
  return AGENT_SEARCH_ATTRIBUTES.map(({ name }) => name).filter((name) => name in (customAttributes ?? {}));
}

/** A client on the real server whose operator service answers as an authorizer does to a caller without admin rights. */
function clientWithoutAdminRights(): AgentClient {
  const denied = Object.assign(new Error('7 PERMISSION_DENIED: Request unauthorized.'), { code: 7 });
  const operatorService = new Proxy(connection.operatorService, {
    get: (target, name) => (name === 'addSearchAttributes' ? async () => Promise.reject(denied) : Reflect.get(target, name)),
  });
  const restricted: ConnectionLike = new Proxy(connection, {
    get: (target, name) => (name === 'operatorService' ? operatorService : Reflect.get(target, name)),
  });
  return new AgentClient(new Client({ connection: restricted, dataConverter: TEST_DATA_CONVERTER }), taskQueue, { issuer });
}

it('refuses a start it cannot set the namespace up for with INVALID_STATE naming the fix, and starts nothing', async () => {
  expect(await registered()).toEqual([]);
  const agents = clientWithoutAdminRights();
  const refused = await agents
    .start({ agentId: 'restricted', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG })
    .catch((err: unknown) => err);
  expect(refused).toMatchObject({ name: 'FabricError', code: 'INVALID_STATE' });
  const message = (refused as Error).message;
  expect(message).toMatch(
    /^namespace default has no search attribute Kv\w+ \(kvfabric's search attributes are not registered\) and this client may not register them/,
  );
  expect(message).toContain(`npx kvfabric setup --address ${server.address} --namespace default`);
  // A listing by tenant needs the attributes too, and says so the same way.
  await expect(agents.list({ tenant: 'acme' })).rejects.toMatchObject({
    code: 'INVALID_STATE',
    message: expect.stringMatching(/^namespace default has no search attribute KvTenant /),
  });
  expect(await registered()).toEqual([]);
  await expect(
    connection.workflowService.describeWorkflowExecution({
      namespace: 'default',
      execution: { workflowId: agentWorkflowId('restricted') },
    }),
  ).rejects.toThrow(/not found/i);
});

it('registers the search attributes on the first start and the agent runs; a filtered listing then finds it', async () => {
  const agents = new AgentClient(new Client({ connection, dataConverter: TEST_DATA_CONVERTER }), taskQueue, { issuer });
  const agent = await agents.start({ agentId: 'newcomer', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  expect(await registered()).toEqual(AGENT_SEARCH_ATTRIBUTES.map(({ name }) => name));
  expect(await agent.turn(16)).toMatchObject({ tokens: 16, turns: 1 });
  const listed = await eventuallyListed(agents);
  expect(listed).toMatchObject({ agentId: 'newcomer', tenant: 'acme', status: 'RUNNING' });
  await agent.release();
});

/** Visibility is eventually consistent: the agent shows in a listing shortly after its start. */
async function eventuallyListed(agents: AgentClient): Promise<unknown> {
  for (let i = 0; i < 100; i++) {
    const found = (await agents.list({ tenant: 'acme' })).agents.find((a) => a.agentId === 'newcomer');
    if (found) return found;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return undefined;
}
