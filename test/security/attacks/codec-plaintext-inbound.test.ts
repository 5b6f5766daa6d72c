// Attack: a Temporal client without the payload codec keys writes into an agent's history -- starts an
// agent workflow with a plaintext input, or sends the owner's stolen capability in a plaintext `turn`
// update, or in one dressed as sealed -- and hopes the worker acts on it. The worker's codec refuses every
// payload it did not seal (PERMISSION_DENIED; a forged one: INTEGRITY) before any workflow or activity
// code sees it, and the refusal stays with the payload that carried it (refused-payloads.ts): the update
// is rejected at once and leaves nothing in the history, the started workflow never runs, no context or
// record is made, and the victim's context is unchanged and keeps serving its owner. Real dev server,
// real worker, Temporal's own plain client.
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';

import { Client, WorkflowUpdateFailedError } from '@temporalio/client';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { agentConfig } from '../../../src/client/agent-client';
import { agentWorkflowId } from '../../../src/identity/agent-identity';
import { dataConverterOf } from '../../../src/security/data-converter';
import { CodecKeyRing } from '../../../src/security/payload-codec';
import { AGENT_WORKFLOW_TYPE, type AgentInput, type TurnArgs } from '../../../src/workflows/definitions';
import type { GpuWorker } from '../../../src/worker/gpu-worker';
import { TEST_AGENT_CONFIG, TINY, eventually, startCluster, type TestCluster } from '../../temporal/harness';
import { TEST_CODEC_KEYS } from '../test-keys';

let cluster: TestCluster;
let worker: GpuWorker;

beforeAll(async () => {
  cluster = await startCluster();
  worker = await cluster.startWorker();
});
afterAll(async () => cluster?.close());

/** The worker's refusal, as it reads in a failure: the payload converter meets the refused payload. */
const REFUSAL = /Unknown encoding: kvfabric-refused PERMISSION_DENIED \(a plaintext payload was refused/;

describe('plaintext inbound payloads', () => {
  it('a plain client starting an agent workflow: its task fails on the plaintext input, nothing runs, no context or record is made', async () => {
    const capability = cluster.agents.mintCapability('plain-start', 'acme');
    const input: AgentInput = {
      agentId: 'plain-start',
      tenant: 'acme',
      capability: cluster.agents.mintCustodian(capability),
      model: TINY,
      config: agentConfig(TEST_AGENT_CONFIG),
    };
    const handle = await cluster.rawClient.workflow.start(AGENT_WORKFLOW_TYPE, {
      workflowId: agentWorkflowId('plain-start'),
      taskQueue: cluster.taskQueue,
      args: [input],
    });

    const failed = await eventually(
      async () => {
        const { events } = await handle.fetchHistory();
        return events?.find((event) => event.workflowTaskFailedEventAttributes)?.workflowTaskFailedEventAttributes ?? undefined;
      },
      30_000,
      'the first workflow task to fail',
    );
    // The one failure the worker leaves unsealed (failure-converter.ts): fixed words naming nothing, which
    // the plain client that sent the payload must read.
    expect(failed.failure!.message).toMatch(REFUSAL);
    expect(failed.failure!.encodedAttributes ?? undefined).toBeUndefined();
    const { events } = await handle.fetchHistory();
    expect(events!.some((event) => event.activityTaskScheduledEventAttributes || event.workflowTaskCompletedEventAttributes)).toBe(false);
    expect(worker.memory.heldContextIds()).not.toContain('plain-start');
    expect(namesUnder(cluster.tierDir).filter((name) => name.includes('plain-start'))).toEqual([]);
    await handle.terminate('attack test');
  });

  it("a plain client's turn update with the owner's capability is rejected at once; the agent is unchanged and serves its owner", async () => {
    const owner = await cluster.agents.start({ agentId: 'plain-victim', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
    await owner.turn(8);
    const before = await owner.status();
    const stolen: TurnArgs = { capability: owner.capability, tokens: 4 };

    const unchanged = async () => {
      expect(await owner.status()).toMatchObject({
        tokens: before.tokens,
        turns: before.turns,
        digest: before.digest,
        denials: before.denials,
        phase: before.phase,
      });
      expect(worker.memory.snapshot('plain-victim').tokens).toBe(8);
    };

    // Temporal's plain client: it gets an error (whose reason, unsealed, says to add kvfabric's client plugin), and no turn ran.
    const plain = await cluster.rawClient.workflow
      .getHandle(agentWorkflowId('plain-victim'))
      .executeUpdate('turn', { args: [stolen], updateId: 'stolen-1' })
      .then(
        () => 'ran',
        () => 'failed',
      );
    expect(plain).toBe('failed');
    await unchanged();
    // A client that sends plaintext but reads with the keys sees the typed reason.
    const reader = new Client({ connection: cluster.rawClient.connection, dataConverter: plaintextSender() });
    const refused = await reader.workflow
      .getHandle(agentWorkflowId('plain-victim'))
      .executeUpdate('turn', { args: [stolen], updateId: 'stolen-2' })
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(WorkflowUpdateFailedError);
    expect((refused as WorkflowUpdateFailedError).cause?.message).toMatch(REFUSAL);

    // Without the key, a payload dressed as sealed fares no better: refused (INTEGRITY), and only its update.
    const forger = new Client({ connection: cluster.rawClient.connection, dataConverter: plaintextSender(forgeSealed) });
    const forged = await forger.workflow
      .getHandle(agentWorkflowId('plain-victim'))
      .executeUpdate('turn', { args: [stolen], updateId: 'stolen-3' })
      .catch((err: unknown) => err);
    expect(forged).toBeInstanceOf(WorkflowUpdateFailedError);
    expect((forged as WorkflowUpdateFailedError).cause?.message).toMatch(/Unknown encoding: kvfabric-refused INTEGRITY/);

    // Nothing changed: the workflow's state, the worker's context, the history (no accepted update).
    await unchanged();
    const { events } = await cluster.client.workflow.getHandle(agentWorkflowId('plain-victim')).fetchHistory();
    const updateIds = events!
      .map((event) => event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.meta?.updateId)
      .filter(Boolean);
    for (const id of ['stolen-1', 'stolen-2', 'stolen-3']) expect(updateIds).not.toContain(id);
    // The owner goes on as if nothing happened.
    expect(await owner.turn(4)).toMatchObject({ tokens: 12, turns: 2 });
    await owner.release();
  });
});

/** kvfabric's converter with sealing taken out: sends plaintext (or what `send` makes of it), opens what the worker sealed. */
function plaintextSender(send: (payload: Payload) => Payload = (payload) => payload) {
  const converter = dataConverterOf(new CodecKeyRing(TEST_CODEC_KEYS));
  const codec = converter.payloadCodecs![0]!;
  const sender: PayloadCodec = {
    encode: async (payloads: Payload[]) => payloads.map(send),
    decode: (payloads: Payload[]) => codec.decode(payloads),
  };
  return { ...converter, payloadCodecs: [sender] };
}

/** What someone without the key can make: the sealed shape (a well-formed header naming the real key id), random bytes. */
function forgeSealed(payload: Payload): Payload {
  const keyId = Buffer.from(TEST_CODEC_KEYS[0]!.id);
  const header = Buffer.concat([Buffer.from([0x01, keyId.length]), keyId, randomBytes(16)]);
  return {
    metadata: { encoding: Buffer.from('binary/encrypted') },
    data: Buffer.concat([header, randomBytes(28 + (payload.data?.length ?? 0))]),
  };
}

function namesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true }) as string[];
}
