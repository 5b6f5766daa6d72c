// Errors that name their cause, as a user meets them, on a real dev server with real workers (issue 39):
// a call with no worker on the queue is UNAVAILABLE within seconds, saying so (before: a 30 s wait, then
// `Failed to query Workflow`); an agent of a model the workers do not serve is refused at `start`, naming
// theirs, and leaves nothing behind (before: `start` succeeded, the workflow failed at once, and the next
// call said `agent m8b is released`); a plain Temporal client's refused update tells it to add kvfabric's
// client plugin (before: `Unknown encoding: binary/encrypted`); the worker's log names the codec key id
// of a payload it refused (before: `Encoded failure`).
import { randomBytes } from 'node:crypto';

import { Client, WorkflowUpdateFailedError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { CapabilityIssuer } from '../../src/security/capability-issuer';
import { dataConverterOf } from '../../src/security/data-converter';
import type { RawKey } from '../../src/security/key-list';
import { CodecKeyRing } from '../../src/security/payload-codec';
import { runCli } from '../cli/run-cli';
import { TEST_AGENT_CONFIG, TINY, eventually, startCluster, type TestCluster } from '../temporal/harness';
import { TEST_CODEC_KEYS, TEST_SIGNING_KEYS, keyListText } from '../security/test-keys';

let cluster: TestCluster;
const CLI_ENV = { KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS), KVFABRIC_SIGNING_KEYS: keyListText(TEST_SIGNING_KEYS) };

beforeAll(async () => {
  cluster = await startCluster(); // no worker yet: the first test needs none
});
afterAll(async () => cluster?.close());

function cliFlags(): string[] {
  return ['--address', cluster.server.address, '--task-queue', cluster.taskQueue];
}

describe('a call with no worker polling the queue', () => {
  it('is UNAVAILABLE within a few seconds, saying no worker serves the queue; the agent answers once one does', async () => {
    const agent = await cluster.agents.start({ agentId: 'unserved', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    const calls: Array<[string, () => Promise<unknown>]> = [
      ['status', () => agent.status()],
      ['turn', () => agent.turn(8)],
    ];
    for (const [what, call] of calls) {
      const started = Date.now();
      const refused = await call().catch((err: unknown) => err);
      const elapsedMs = Date.now() - started;
      console.log(`${what} with no worker polling: UNAVAILABLE after ${elapsedMs} ms`);
      expect(refused).toMatchObject({ name: 'FabricError', code: 'UNAVAILABLE' });
      expect((refused as Error).message).toContain(`no worker serves task queue '${cluster.taskQueue}' (namespace default)`);
      expect(elapsedMs).toBeLessThan(6000);
    }

    const status = await runCli(['status', 'unserved', ...cliFlags()], CLI_ENV);
    expect(status).toMatchObject({ code: 1, stdout: '' });
    expect(status.stderr).toMatch(new RegExp(`^kvfabric: no worker serves task queue '${cluster.taskQueue}' .+ \\(UNAVAILABLE\\)\\n$`));

    // Nothing was sent: the refused turn never runs; the agent starts with its first worker and takes the next.
    await cluster.startWorker();
    expect(await agent.turn(8)).toMatchObject({ turns: 1, tokens: 8 });
    await agent.release();
  });
});

/** The cluster's worker on its own queue (the first test starts it when it comes to it). */
async function ensureWorker(): Promise<void> {
  if (!cluster.workers.some((w) => w.holder.startsWith(`${cluster.taskQueue}@`))) await cluster.startWorker();
}

describe('an agent of a model the workers do not serve', () => {
  beforeAll(ensureWorker);
  const refusal = (agentId: string) =>
    `cannot start agent ${agentId} with model llama-3-8b: agent model needs 131072 bytes per token and 16 tokens per block; ` +
    'this worker serves model tiny: 256 bytes per token and 16 tokens per block';

  it("is refused at start (INVALID_ARGUMENT, naming the workers' model), and its id starts again with theirs", async () => {
    const refused = await cluster.agents
      .start({ agentId: 'm8b', tenant: 'acme', model: 'llama-3-8b', config: TEST_AGENT_CONFIG })
      .catch((err: unknown) => err);
    expect(refused).toMatchObject({ name: 'FabricError', code: 'INVALID_ARGUMENT', message: refusal('m8b') });
    for (const worker of cluster.workers) expect(worker.memory.heldContextIds()).not.toContain('m8b');
    const { agents } = await cluster.agents.list();
    expect(agents.map((a) => a.agentId)).not.toContain('m8b');

    const agent = await cluster.agents.start({ agentId: 'm8b', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    expect(await agent.turn(8)).toMatchObject({ turns: 1, tokens: 8 });
    await agent.release();
  });

  it('started while no worker polled, it fails when one comes, and its next call says why (not `released`)', async () => {
    const queue = `kvfabric-later-${randomBytes(3).toString('hex')}`;
    const agents = new AgentClient(cluster.client, queue, cluster.agents.security);
    const agent = await agents.start({ agentId: 'm8-later', tenant: 'acme', model: 'llama-3-8b', config: TEST_AGENT_CONFIG });
    await cluster.startWorker({ config: { taskQueue: queue } });
    await eventually(
      async () => ((await agents.workflow('m8-later').describe()).status.name === 'FAILED' ? true : undefined),
      20_000,
      'the refused agent to fail',
    );
    const refused = await agent.turn(8).catch((err: unknown) => err);
    expect(refused).toMatchObject({
      name: 'FabricError',
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(/^agent m8-later ended: agent model needs 131072 bytes per token .+ this worker serves model tiny/),
    });
  });

  it('kvfabric start exits 1 with the refusal on one line', async () => {
    const run = await runCli(['start', 'm8c', '--tenant', 'acme', '--model', 'llama-3-8b', ...cliFlags()], CLI_ENV);
    expect(run).toMatchObject({ code: 1, stdout: '', stderr: `kvfabric: ${refusal('m8c')} (INVALID_ARGUMENT)\n` });
  });
});

describe('codec refusals', () => {
  beforeAll(ensureWorker);
  it("tell a plain Temporal client whose update was refused to add kvfabric's client plugin", async () => {
    const owner = await cluster.agents.start({ agentId: 'plain-target', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    const refused = await cluster.rawClient.workflow
      .getHandle(agentWorkflowId('plain-target'))
      .executeUpdate('turn', { args: [{ capability: owner.capability, tokens: 4 }] })
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(WorkflowUpdateFailedError);
    expect((refused as WorkflowUpdateFailedError).cause?.message).toMatch(
      /^Unknown encoding: kvfabric-refused PERMISSION_DENIED \(a plaintext payload was refused: .+add kvfabric's client plugin, KvFabricClientPlugin from 'kvfabric\/plugin', to that client/,
    );
    expect(await owner.status()).toMatchObject({ turns: 0, tokens: 0 });
    await owner.release();
  });

  it('are logged by the worker naming the key id the payload was sealed with and the keys it holds', async () => {
    const queue = `kvfabric-logs-${randomBytes(3).toString('hex')}`;
    const worker = await cluster.spawnWorker({ workerId: `logs-${randomBytes(3).toString('hex')}`, taskQueue: queue });
    const other: RawKey = { id: 'other-codec', key: randomBytes(32) };
    const foreign = new AgentClient(
      new Client({ connection: cluster.client.connection, dataConverter: dataConverterOf(new CodecKeyRing([other])) }),
      queue,
      { issuer: new CapabilityIssuer(TEST_SIGNING_KEYS) },
    );
    const refused = await foreign
      .start({ agentId: 'foreign-logged', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG })
      .catch((err: unknown) => err);
    expect(refused).toMatchObject({ code: 'PERMISSION_DENIED' });
    const line =
      "kvfabric refused a payload (PERMISSION_DENIED): payload sealed with key 'other-codec', which this process does not hold; " +
      "this worker holds payload codec key 'test-codec-1': clients and workers need the same payload codec keys";
    await eventually(async () => (worker.output().includes(line) ? true : undefined), 10_000, 'the refusal in the worker log');
    worker.child.kill('SIGTERM');
    await worker.exited;
  });
});
