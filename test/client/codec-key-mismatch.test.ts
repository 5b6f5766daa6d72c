// A client and workers with different payload codec keys, on a real dev server with a real GPU worker
// (codec key test-codec-1). Before, `start` succeeded, the first turn failed after about 20 s with
// "Workflow Task in failed state", the cause was only in the worker's log, the workflow retried forever and
// `kvfabric list --all` failed outright. Now each side of the mismatch is PERMISSION_DENIED naming the key
// id, an agent no worker can read is ended at once, the agent a foreign client called is unchanged, and a
// listing skips what it cannot read with a note.
import { randomBytes } from 'node:crypto';

import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { CapabilityIssuer } from '../../src/security/capability-issuer';
import { dataConverterOf } from '../../src/security/data-converter';
import { keyListText, type RawKey } from '../../src/security/key-list';
import { CodecKeyRing } from '../../src/security/payload-codec';
import { TEST_AGENT_CONFIG, TINY, eventually, startCluster, type TestCluster } from '../temporal/harness';
import { TEST_CODEC_KEYS, TEST_SIGNING_KEYS } from '../security/test-keys';
import { runCli } from '../cli/run-cli';

const WORKERS_KEY = TEST_CODEC_KEYS[0]!.id;
const OTHER: RawKey = { id: 'other-codec', key: randomBytes(32) };

let cluster: TestCluster;
let connection: Connection;
const issuer = new CapabilityIssuer(TEST_SIGNING_KEYS);

beforeAll(async () => {
  cluster = await startCluster();
  await cluster.startWorker();
  connection = await Connection.connect({ address: cluster.server.address });
});
afterAll(async () => {
  await connection?.close();
  await cluster?.close();
});

/** An AgentClient whose codec holds `keys`, sealing with the first. */
function clientWith(keys: RawKey[], taskQueue = cluster.taskQueue): AgentClient {
  return new AgentClient(new Client({ connection, dataConverter: dataConverterOf(new CodecKeyRing(keys)) }), taskQueue, { issuer });
}

async function statusOf(agentId: string): Promise<string> {
  const { workflowExecutionInfo } = await connection.workflowService.describeWorkflowExecution({
    namespace: 'default',
    execution: { workflowId: agentWorkflowId(agentId) },
  });
  return temporal.api.enums.v1.WorkflowExecutionStatus[workflowExecutionInfo!.status!]!;
}

describe('an agent started by a client whose codec key the workers lack', () => {
  it('fails the start with PERMISSION_DENIED naming both keys, and ends the run instead of leaving it retrying', async () => {
    const refused = await clientWith([OTHER])
      .start({ agentId: 'foreign-1', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG })
      .catch((err: unknown) => err);
    expect(refused).toMatchObject({ name: 'FabricError', code: 'PERMISSION_DENIED' });
    expect((refused as Error).message).toBe(
      `agent foreign-1: this client cannot read its workers' payloads: they are sealed with payload codec key '${WORKERS_KEY}', which this client does not hold ` +
        `(this client sealed the agent's input with '${OTHER.id}'): give clients and workers the same payload codec keys ` +
        '(KVFABRIC_CODEC_KEYS or KVFABRIC_CODEC_KEYS_FILE, e.g. the codec.keys of one `kvfabric keygen`)',
    );
    expect(await statusOf('foreign-1')).toBe('WORKFLOW_EXECUTION_STATUS_TERMINATED');
  });

  it('names the key the workers lack when this client can read their answer (it holds both, seals with the other)', async () => {
    const refused = await clientWith([OTHER, ...TEST_CODEC_KEYS])
      .start({ agentId: 'foreign-2', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG })
      .catch((err: unknown) => err);
    expect(refused).toMatchObject({ name: 'FabricError', code: 'PERMISSION_DENIED' });
    expect((refused as Error).message).toMatch(
      new RegExp(
        `^agent foreign-2: its worker cannot read this client's payloads: they are sealed with payload codec key '${OTHER.id}', which the worker does not hold: `,
      ),
    );
    expect(await statusOf('foreign-2')).toBe('WORKFLOW_EXECUTION_STATUS_TERMINATED');
  });
});

describe('a call from a client with another codec key on a healthy agent', () => {
  it.each([
    [
      'holding only its own key',
      [OTHER],
      `this client cannot read its workers' payloads: they are sealed with payload codec key '${WORKERS_KEY}'`,
    ],
    [
      "holding the workers' key too, sealing with its own",
      [OTHER, ...TEST_CODEC_KEYS],
      `its worker cannot read this client's payloads: they are sealed with payload codec key '${OTHER.id}'`,
    ],
  ])('is PERMISSION_DENIED naming the key (%s), and the agent is unchanged', async (_what, keys, expected) => {
    const agentId = `healthy-${randomBytes(3).toString('hex')}`;
    const owner = await cluster.agents.start({ agentId, tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    await owner.turn(16);
    const before = await owner.status();

    const foreign = clientWith(keys).agent(agentId, owner.capability);
    const refused = await foreign.turn(8).catch((err: unknown) => err);
    expect(refused).toMatchObject({ name: 'FabricError', code: 'PERMISSION_DENIED' });
    expect((refused as Error).message).toContain(`agent ${agentId}: ${expected}`);

    expect(await owner.status()).toEqual(before);
    expect(await owner.turn(16)).toMatchObject({ tokens: 32, turns: 2 });
    expect(await statusOf(agentId)).toBe('WORKFLOW_EXECUTION_STATUS_RUNNING');
    await owner.release();
  });
});

it('ends an agent started while no worker polled once a turn finds that its worker cannot read it', async () => {
  const queue = `kvfabric-later-${randomBytes(3).toString('hex')}`;
  const foreign = clientWith([OTHER], queue);
  const agent = await foreign.start({ agentId: 'unread', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  await cluster.startWorker({ config: { taskQueue: queue } });
  const refused = await agent.turn(8).catch((err: unknown) => err);
  expect(refused).toMatchObject({ name: 'FabricError', code: 'PERMISSION_DENIED' });
  expect((refused as Error).message).toContain(`sealed with payload codec key '${WORKERS_KEY}', which this client does not hold`);
  expect(await statusOf('unread')).toBe('WORKFLOW_EXECUTION_STATUS_TERMINATED');
});

it('lists what this client can read and skips the rest with a note naming the key (kvfabric list --all)', async () => {
  const readable = await cluster.agents.start({ agentId: 'listed', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  // Visibility is eventually consistent: wait until the new agent shows.
  await eventually(
    async () => ((await cluster.agents.list()).agents.some((a) => a.agentId === 'listed') ? true : undefined),
    10_000,
    'the agent in a listing',
  );
  const env = { KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS) };
  const listed = await runCli(['list', '--all', '--address', cluster.server.address, '--json'], env);
  expect(listed.code).toBe(0);
  const agentIds = (JSON.parse(listed.stdout) as Array<{ agentId: string }>).map((a) => a.agentId);
  expect(agentIds).toContain('listed');
  expect(agentIds).not.toContain('foreign-1');
  expect(listed.stderr).toContain(
    `kvfabric: skipped agent foreign-1 (TERMINATED): payload sealed with key '${OTHER.id}', which this client does not hold`,
  );

  const { agents, skipped } = await clientWith([OTHER]).list({ includeClosed: true });
  expect(agents.map((a) => a.agentId)).toEqual(expect.arrayContaining(['foreign-1', 'foreign-2', 'unread']));
  expect(skipped.map((a) => a.agentId)).toContain('listed');
  expect(skipped.find((a) => a.agentId === 'listed')?.reason).toBe(
    `payload sealed with key '${WORKERS_KEY}', which this client does not hold`,
  );
  await readable.release();
});
