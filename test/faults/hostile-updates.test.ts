// Hostile input to a running agent: random, malformed and mistyped arguments to every update, sent raw
// (no client library to tidy them). Each must fail with a typed error (the validator's INVALID_ARGUMENT
// before anything reaches history, or the worker's PERMISSION_DENIED for a token it cannot verify), or
// be a no-op that changes nothing, and leave the agent exactly as it was and still working.
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { TEST_AGENT_CONFIG, TINY, expectedDigest, startCluster, type TestCluster } from '../temporal/harness';

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster();
  await cluster.startWorker();
});
afterAll(async () => cluster?.close());

const UPDATES = ['turn', 'suspend', 'resume', 'fork', 'pin', 'unpin', 'release', 'renew', 'holderLeft'] as const;

/** Arguments of every shape: wrong types, missing and extra fields, huge numbers, odd strings. */
const garbage = fc.oneof(
  fc.anything({ maxDepth: 2 }),
  fc.record(
    {
      capability: fc.oneof(fc.string({ maxLength: 64 }), fc.integer(), fc.constant(null), fc.constant('e30.e30.e30')),
      tokens: fc.oneof(fc.integer(), fc.double(), fc.string({ maxLength: 8 }), fc.constant(2 ** 60), fc.constant(-1)),
      tier: fc.oneof(fc.constantFrom('host', 'disk', 'gpu', ''), fc.integer()),
      childId: fc.oneof(fc.string({ maxLength: 200 }), fc.constantFrom('../x', 'hostile', 'a'.repeat(129)), fc.integer()),
      childCapability: fc.oneof(fc.string({ maxLength: 32 }), fc.constant(undefined)),
      next: fc.oneof(fc.string({ maxLength: 32 }), fc.constant(null)),
    },
    { requiredKeys: [] },
  ),
);

it('refuses random and malformed update arguments with typed errors and leaves the agent as it was', async () => {
  const id = 'hostile-target';
  const agent = await cluster.agents.start({ agentId: id, tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  await agent.turn(21);
  const handle = cluster.agents.workflow(id);
  const before = await agent.status();
  const codes = new Map<string, number>();

  await fc.assert(
    fc.asyncProperty(fc.constantFrom(...UPDATES), garbage, async (update, args) => {
      const outcome = await handle.executeUpdate(update, { args: [args] }).then(
        (value) => ({ value }),
        (err: unknown) => ({ err }),
      );
      if ('value' in outcome) {
        // Only a no-op answers without the worker (unpin when not pinned, suspend when already there): it
        // returns the status anyone with Temporal access can query, and changes nothing.
        expect(['unpin', 'suspend']).toContain(update);
        expect(outcome.value).toMatchObject({ tokens: 21, digest: before.digest, pinned: false });
        codes.set('no-op', (codes.get('no-op') ?? 0) + 1);
        return;
      }
      const err = outcome.err;
      expect(err).toBeInstanceOf(WorkflowUpdateFailedError);
      const cause = (err as WorkflowUpdateFailedError).cause;
      expect(cause).toBeInstanceOf(ApplicationFailure);
      const type = (cause as ApplicationFailure).type ?? '';
      expect(['INVALID_ARGUMENT', 'PERMISSION_DENIED']).toContain(type);
      codes.set(type, (codes.get(type) ?? 0) + 1);
    }),
    { numRuns: 120 },
  );
  console.log(`[hostile-updates] 120 malformed updates: ${JSON.stringify(Object.fromEntries(codes))}`);

  const after = await agent.status();
  expect(after).toMatchObject({ phase: before.phase, tier: before.tier, tokens: 21, digest: before.digest, pinned: false, forks: 0 });
  expect(await handle.describe()).toMatchObject({ status: { name: 'RUNNING' } });
  expect(await agent.turn(3)).toMatchObject({ tokens: 24, turns: 2 });
  expect(await agent.status()).toMatchObject({
    tokens: 24,
    digest: expectedDigest([
      [id, 0, 21],
      [id, 1, 3],
    ]),
  });
  await agent.release();
}, 120_000);
