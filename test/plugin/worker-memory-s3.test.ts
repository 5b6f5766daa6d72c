// Two workers' memory opened as the plugin opens it, from an s3:// tier URL on a real S3 server
// (SeaweedFS), each with a private scratch directory and no directory in common: the agent's workflow
// starts it and checkpoints a turn on the first, the first goes away, and the second recovers and resumes
// it from the bucket alone, byte for byte (the same digest). Each scratch directory holds that worker's
// audit folder and nothing else; the shared state is in the bucket.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { emptyDigest } from '../../src/agent-memory/context-digest';
import { MODELS } from '../../src/engines/models';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { openWorkerMemory, type WorkerMemory } from '../../src/plugin/worker-memory';
import type { KvFabricWorkerOptions } from '../../src/plugin/worker-options';
import { CapabilityIssuer } from '../../src/security/capability-issuer';
import { startSeaweedfs, type SeaweedfsServer } from '../support/seaweedfs';
import { credentialsInEnvironment } from '../support/sdk-chain-credentials';
import { as, workflowOf } from '../security/attacks/activity-fixture';
import { TEST_CODEC_KEYS, TEST_SIGNING_KEYS, TEST_TRUSTED_KEYS } from '../security/test-keys';

const master = [{ id: 'master', key: randomBytes(32) }];
let server: SeaweedfsServer;
let scratch: string;
let restoreEnvironment: () => void = () => undefined;
const opened: WorkerMemory[] = [];

beforeAll(async () => {
  server = await startSeaweedfs();
  scratch = mkdtempSync(join(tmpdir(), 'kvfabric-worker-s3-'));
  restoreEnvironment = credentialsInEnvironment(server);
}, 120_000);
afterAll(async () => {
  for (const memory of opened.splice(0)) await memory.close().catch(() => undefined);
  restoreEnvironment();
  await server?.close();
  rmSync(scratch, { recursive: true, force: true });
});

function optionsOf(workerId: string): KvFabricWorkerOptions {
  return {
    workerId,
    tierUrl: `s3://${server.bucket}/fleet`,
    s3: { endpoint: server.endpoint, forcePathStyle: true },
    scratchDir: join(scratch, workerId),
    pool: { backend: 'cpu', device: 0, deviceBlocks: 64, hostBlocks: 64 },
    engine: { name: 'synthetic', contextLength: 4096, model: MODELS.tiny! },
    keys: {
      master,
      activeMasterKeyId: 'master',
      trusted: TEST_TRUSTED_KEYS,
      codec: TEST_CODEC_KEYS,
      activeCodecKeyId: TEST_CODEC_KEYS[0]!.id,
    },
    chores: { housekeepingMs: 0, orphanMinAgeMs: 3_600_000 },
  };
}

async function openWorker(workerId: string): Promise<WorkerMemory> {
  const memory = await openWorkerMemory(optionsOf(workerId), `kvfabric@${workerId}`, true);
  opened.push(memory);
  return memory;
}

describe('workers on an s3:// tier', () => {
  it('resume on another worker what one checkpointed, sharing only the bucket', async () => {
    const agentId = 'traveller';
    const capability = new CapabilityIssuer(TEST_SIGNING_KEYS).mint({ tenant: 'acme', agentId, workflowId: agentWorkflowId(agentId) });
    const base = { agentId, tenant: 'acme', capability };
    const first = await openWorker('first');
    const { placement, holder } = first.activities;
    await as(workflowOf(agentId), () =>
      placement.allocate({ ...base, operationId: `${agentId}:0`, shape: MODELS.tiny!.shape, tokensPerBlock: 16, checkpoint: true }),
    );
    const turned = await as(workflowOf(agentId), () =>
      holder.turn({ ...base, operationId: `${agentId}:1`, turn: 0, tokens: 40, before: emptyDigest(), checkpoint: true }),
    );
    await first.close();
    opened.splice(opened.indexOf(first), 1);

    const second = await openWorker('second');
    const resumed = await as(workflowOf(agentId), async () => {
      await second.activities.placement.recover({ ...base, operationId: `${agentId}:2`, epoch: 1, minVersion: turned.durableVersion });
      return second.activities.holder.resume({ ...base, operationId: `${agentId}:3`, expected: turned.digest });
    });
    expect(resumed).toMatchObject({ tokens: 40, tier: 'device', from: 'disk', digest: turned.digest });

    // Each worker's own directory has its audit folder only; the cold tier and the records are in the bucket.
    for (const workerId of ['first', 'second']) expect(readdirSync(join(scratch, workerId))).toEqual(['audit']);
    const bucket = server.store({ prefix: 'fleet/' });
    const folders = new Set((await bucket.list('')).map((head) => head.key.split('/')[0]));
    await bucket.close();
    expect([...folders]).toEqual(expect.arrayContaining(['cold', 'grants', 'fences', 'tenants']));
  }, 120_000);
});
