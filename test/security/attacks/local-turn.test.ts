// Attack class: the local turn as a way around the holder's checks. A hot turn runs as a local activity
// (turnIfHolder) in the workflow task of whichever worker holds the context, so a caller of another
// tenant, agent or workflow tries it instead of the holder's `turn`: to append to the victim's context, or
// to name an operation id the victim's workflow already ran and get its recorded result. Each is refused
// exactly as the holder's turn refuses it; and the victim's own re-run of a local turn (a workflow task
// retried after the local activity ran) and its holder-queue retry are answered from the record, applied once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { LocalTurnRequest } from '../../../src/activities';
import { emptyDigest, type DigestState } from '../../../src/agent-memory/context-digest';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { activitiesOf, as, denials, intrudersOf, workflowOf, type Activities, type Intruder } from './activity-fixture';

/** The queue activitiesOf's worker answers as: the holder every local turn here names. */
const HOLDER = 'queue@victim-worker';
/** Reads that find a context and its tier: what a local turn may do before it answers null or admits. */
const LOOKUPS = ['has', 'residency', 'contextStats', 'durableVersion'];

let dir: string;
let fx: MemoryFixture;
let activities: Activities;
const victim = workflowOf('victim');
let victimToken: string;
let afterTurn: DigestState;
/** The victim's digest after its latest turn, as its workflow records it. */
let latest: DigestState;

const localTurn = (over: Partial<LocalTurnRequest> & Pick<LocalTurnRequest, 'capability' | 'operationId'>): LocalTurnRequest => ({
  agentId: 'victim',
  tenant: 'acme',
  turn: 1,
  tokens: 8,
  before: afterTurn,
  checkpoint: false,
  holder: HOLDER,
  ...over,
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-attack-local-turn-'));
  fx = await openMemory(dir);
  activities = activitiesOf(fx);
  victimToken = fx.token('victim');
  await fx.allocate('victim', victimToken);
  // The victim's first turn, run locally as operation victim:1: its result is in this worker's journal.
  const first = await as(victim, () =>
    activities.local.turnIfHolder(
      localTurn({ capability: victimToken, operationId: 'victim:1', turn: 0, tokens: 24, before: emptyDigest() }),
    ),
  );
  afterTurn = first!.digest;
});
afterAll(async () => {
  await fx?.close();
  rmSync(dir, { recursive: true, force: true });
});

const INTRUDERS: Intruder[] = intrudersOf(
  () => fx,
  () => victimToken,
);

describe('attack: a local turn on another agent’s context', () => {
  it.each(INTRUDERS)('$name: PERMISSION_DENIED ($reason) as from the holder’s turn, nothing appended, audited', async (intruder) => {
    const refusals: Array<{ reason: string; message: string }> = [];
    for (const way of ['holder', 'local'] as const) {
      const before = { snapshot: fx.memory.snapshot('victim'), audits: denials(fx).length, calls: fx.tierCalls.length };
      // A fresh operation id each way: what is refused is the call, not a replay.
      const request = localTurn({
        tenant: intruder.tenant,
        capability: intruder.capability(),
        operationId: `victim:${way}-${intruder.reason}`,
      });
      const attempt = as(intruder.caller(), () =>
        way === 'local' ? activities.local.turnIfHolder(request) : activities.holder.turn(request),
      );
      await expect(attempt).rejects.toMatchObject({ type: 'PERMISSION_DENIED' });
      const failure = (await attempt.catch((err: unknown) => err)) as Error;

      expect(fx.tierCalls.slice(before.calls).filter((name) => !LOOKUPS.includes(name))).toEqual([]);
      expect(fx.memory.snapshot('victim')).toEqual(before.snapshot);
      const audits = denials(fx).slice(before.audits);
      expect(audits).toHaveLength(1);
      expect(audits[0]).toMatchObject({ context: 'victim', action: 'turn', reason: intruder.reason });
      refusals.push({ reason: String(audits[0]!.reason), message: failure.message });
    }
    expect(refusals[1]).toEqual(refusals[0]);
  });

  it("names the victim's recorded operation id and gets a refusal, never the victim's recorded turn", async () => {
    const request = localTurn({
      tenant: 'acme',
      capability: fx.token('sibling'),
      operationId: 'victim:1',
      turn: 0,
      tokens: 24,
      before: emptyDigest(),
    });
    const attempt = as({ ...workflowOf('sibling'), attempt: 2 }, () => activities.local.turnIfHolder(request));
    await expect(attempt).rejects.toMatchObject({ type: 'PERMISSION_DENIED' });
    expect(((await attempt.catch((err: unknown) => err)) as Error).message).not.toContain(afterTurn.value);
    expect(fx.memory.snapshot('victim').tokens).toBe(24);
  });

  it('answers null, checking and recording nothing, for a turn that names another holder or a context not held here', async () => {
    const audits = denials(fx).length;
    const calls = fx.tierCalls.length;
    const forged = { capability: 'not-a-token', operationId: 'victim:elsewhere' };
    expect(
      await as(workflowOf('mallory'), () => activities.local.turnIfHolder(localTurn({ ...forged, holder: 'queue@mallory' }))),
    ).toBeNull();
    expect(await as(workflowOf('mallory'), () => activities.local.turnIfHolder(localTurn({ ...forged, agentId: 'not-held' })))).toBeNull();
    expect(fx.tierCalls.slice(calls).filter((name) => !LOOKUPS.includes(name))).toEqual([]);
    expect(denials(fx)).toHaveLength(audits);
  });
});

describe("the victim's own re-runs of a local turn", () => {
  it('are answered from the record, locally and on the holder’s queue alike, and the turn is applied once', async () => {
    const request = localTurn({ capability: victimToken, operationId: 'victim:2' });
    const applied = await as(victim, () => activities.local.turnIfHolder(request));
    expect(applied).toMatchObject({ tokens: 32, alreadyApplied: false });
    latest = applied!.digest;

    // The workflow task that ran it failed and runs it again; then the holder's queue gets the same id.
    const rerun = await as(victim, () => activities.local.turnIfHolder(request));
    const queued = await as({ ...victim, attempt: 2 }, () => activities.holder.turn(request));
    for (const answer of [rerun, queued]) {
      expect(answer).toMatchObject({ tokens: 32, alreadyApplied: false }); // applied again, it would say true or fail
      expect(answer!.digest).toEqual(applied!.digest);
    }
    expect(fx.memory.snapshot('victim').tokens).toBe(32);
  });

  it('on a context no longer resident here goes to the holder’s queue (null), which answers the same id from the record', async () => {
    const request = localTurn({ capability: victimToken, operationId: 'victim:3', turn: 2, tokens: 4, before: latest });
    const applied = await as(victim, () => activities.local.turnIfHolder(request));
    await fx.memory.suspend(fx.call('victim', 'acme', 'suspend', victimToken), { tier: 'host' });
    expect(await as(victim, () => activities.local.turnIfHolder(request))).toBeNull();
    const queued = await as({ ...victim, attempt: 2 }, () => activities.holder.turn(request));
    expect(queued.digest).toEqual(applied!.digest);
    expect(fx.memory.snapshot('victim').tokens).toBe(36);
  });
});
