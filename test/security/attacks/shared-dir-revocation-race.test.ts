// Attack class: a lost revocation (issue 25, item 5). Raising a context's epoch read the record, then
// wrote it: two raises at once (2000 and 1000) left 1000 in 81 of 200 trials, and every token between the
// two epochs worked again. A stale renewal racing a newer one, or a replayed hand-off, is enough. The
// record is now a monotonic maximum kept as entry names (src/shared-directory/rising-records.ts). Here two
// workers renew one agent at once through their activities, and separate processes raise one context's
// epoch at the same instant; after each, the greatest epoch holds, a token below it is refused
// PERMISSION_DENIED (revoked) and audited, and nothing else changed: the agent's bytes, its grant, and
// another agent's record and token.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { AllocateRequest } from '../../../src/activities';
import { emptyDigest, type DigestState } from '../../../src/agent-memory/context-digest';
import { readClaimsUnverified } from '../../../src/security/capability-issuer';
import { EpochStore } from '../../../src/shared-directory/epochs';
import { MODELS } from '../../../src/engines/models';
import { Racers } from '../../shared-directory/fixtures/racers';
import { posixStore, testRecordSeal } from '../../shared-directory/fixtures/test-records';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { activitiesOf, as, denials, workflowOf, type Activities } from './activity-fixture';

let dir: string;
/** Two workers sharing one tier directory: own pools, one cold tier, grants and epochs. */
let workerA: MemoryFixture;
let workerB: MemoryFixture;
let activitiesA: Activities;
let activitiesB: Activities;
let epochs: EpochStore;

const allocation = (agentId: string, capability: string): AllocateRequest => ({
  agentId,
  tenant: 'acme',
  capability,
  operationId: `${agentId}:0`,
  shape: MODELS.tiny!.shape,
  tokensPerBlock: MODELS.tiny!.tokensPerBlock,
  checkpoint: true,
});
const epochOf = (token: string) => readClaimsUnverified(token).epoch;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-attack-revocation-'));
  workerA = await openMemory(dir);
  workerB = await openMemory(dir);
  activitiesA = activitiesOf(workerA);
  activitiesB = activitiesOf(workerB);
  epochs = await EpochStore.open(await posixStore(dir), 'epochs/', testRecordSeal());
});
afterAll(async () => {
  await workerA?.close();
  await workerB?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('attack: losing a revocation to a concurrent lower one', () => {
  it('two workers renewing one agent at once, a newer and a stale renewal: the newer revocation always holds (40 trials)', async () => {
    for (let trial = 0; trial < 40; trial++) {
      const agentId = `renewed-${trial}`;
      const current = workerA.token(agentId);
      await as(workflowOf(agentId), () => activitiesA.placement.allocate(allocation(agentId, current)));
      const base = epochOf(current);
      const newer = workerA.token(agentId, 'acme', { epoch: base + 2000 });
      const stale = workerA.token(agentId, 'acme', { epoch: base + 1000 });
      const renewals: [Activities, string][] =
        trial % 2 === 0
          ? [
              [activitiesA, newer],
              [activitiesB, stale],
            ]
          : [
              [activitiesB, stale],
              [activitiesA, newer],
            ];
      const outcomes = await Promise.allSettled(
        renewals.map(([activities, next], i) =>
          as(workflowOf(agentId), () =>
            activities.holder.renew({
              agentId,
              tenant: 'acme',
              capability: current,
              operationId: `${agentId}:${i + 1}`,
              next,
              nextCustodian: workerA.issuer.mintCustodian(next),
            }),
          ),
        ),
      );
      // A renewal that lost the race to the other is refused (its presenter was revoked meanwhile), never half done.
      const applied = renewals.filter((_, i) => outcomes[i]!.status === 'fulfilled').map(([, next]) => epochOf(next));
      for (const outcome of outcomes)
        if (outcome.status === 'rejected')
          expect(outcome.reason).toMatchObject({ type: 'PERMISSION_DENIED', message: expect.stringContaining('revoked') });
      expect(applied.length).toBeGreaterThan(0);
      expect(await epochs.minimum(agentId)).toBe(Math.max(...applied));
      if (applied.includes(base + 2000)) {
        const audits = denials(workerB).length;
        await expect(
          workerB.memory.admit(workerB.call(agentId, 'acme', 'resume', workerB.token(agentId, 'acme', { epoch: base + 1500 }))),
        ).rejects.toMatchObject({
          code: 'PERMISSION_DENIED',
          message: expect.stringContaining('revoked'),
        });
        expect(denials(workerB).slice(audits)).toEqual([
          expect.objectContaining({ agent: agentId, context: agentId, action: 'resume', reason: 'revoked' }),
        ]);
      }
    }
  });

  describe('processes raising one epoch at the same instant', () => {
    let racers: Racers;
    beforeAll(async () => {
      racers = await Racers.start(2);
    });
    afterAll(() => racers?.stop());

    it('keep the greater in every one of 100 trials; a token below it is refused (revoked), audited, and nothing else changed', async () => {
      const owner = workerA.token('planner');
      const bystander = workerA.token('critic');
      await as(workflowOf('planner'), () => activitiesA.placement.allocate(allocation('planner', owner)));
      await as(workflowOf('critic'), () => activitiesA.placement.allocate(allocation('critic', bystander)));
      const digest: DigestState = (
        await as(workflowOf('planner'), () =>
          activitiesA.holder.turn({
            agentId: 'planner',
            tenant: 'acme',
            capability: owner,
            operationId: 'planner:1',
            turn: 0,
            tokens: 24,
            before: emptyDigest(),
            checkpoint: true,
          }),
        )
      ).digest;
      const grantsBefore = readdirSync(join(dir, 'grants')).map((name) => [name, readFileSync(join(dir, 'grants', name), 'utf8')]);
      const snapshot = workerA.memory.snapshot('planner');

      const base = epochOf(owner);
      let highest = 0;
      for (let trial = 0; trial < 100; trial++) {
        const [low, high] = [base + 10 * trial + 5, base + 10 * trial + 9];
        const raises = trial % 2 === 0 ? [high, low] : [low, high];
        const results = await racers.race(
          raises.map((value) => ({ op: 'raise' as const, dir: join(dir, 'epochs'), contextId: 'planner', value })),
        );
        expect(results).toEqual([{ ok: true }, { ok: true }]);
        expect(await epochs.minimum('planner')).toBe(high);
        highest = high;
      }

      // A token the higher raise revoked, as the agent's own workflow would present it.
      const revoked = workerA.token('planner', 'acme', { epoch: highest - 1 });
      const audits = denials(workerA).length;
      await expect(
        as(workflowOf('planner'), () =>
          activitiesA.holder.turn({
            agentId: 'planner',
            tenant: 'acme',
            capability: revoked,
            operationId: 'planner:2',
            turn: 1,
            tokens: 8,
            before: digest,
            checkpoint: false,
          }),
        ),
      ).rejects.toMatchObject({ type: 'PERMISSION_DENIED', message: expect.stringContaining('revoked') });
      expect(denials(workerA).slice(audits)).toEqual([
        expect.objectContaining({ agent: 'planner', tenant: 'acme', context: 'planner', action: 'turn', reason: 'revoked' }),
      ]);

      // Nothing changed: the record, the bytes, the grants; the other agent is untouched and its token works.
      expect(await epochs.minimum('planner')).toBe(highest);
      expect(workerA.memory.snapshot('planner')).toEqual(snapshot);
      expect(readdirSync(join(dir, 'grants')).map((name) => [name, readFileSync(join(dir, 'grants', name), 'utf8')])).toEqual(grantsBefore);
      // Its allocation's epoch, as its start left it (allocate revokes every token minted before its own).
      expect(await epochs.minimum('critic')).toBe(epochOf(bystander));
      await expect(workerA.memory.admit(workerA.call('critic', 'acme', 'resume', bystander))).resolves.toMatchObject({ sub: 'critic' });
      // The newest token still opens the agent, whose bytes still verify against the digest.
      const newest = workerA.token('planner', 'acme', { epoch: highest });
      await expect(workerA.memory.resume(workerA.call('planner', 'acme', 'resume', newest), { expected: digest })).resolves.toMatchObject({
        digest,
        tokens: 24,
      });
    });
  });
});
