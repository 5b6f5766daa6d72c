// Attack class: the operation journal answers without admission. Operation ids are predictable
// (`<agentId>:<n>`), so a caller of another tenant, agent or workflow asks for an id the victim's workflow
// already ran and hopes for the recorded result (the victim's turn, its reply, its snapshot). And an agent
// id reused after a release must get a context of its own, not the released agent's recorded answers.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { AllocateRequest, ContextRequest, TurnRequest } from '../../../src/activities';
import { emptyDigest, type DigestState } from '../../../src/agent-memory/context-digest';
import { MODELS } from '../../../src/engines/models';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { activitiesOf, as, denials, intrudersOf, workflowOf, type Activities, type Intruder } from './activity-fixture';

let dir: string;
let fx: MemoryFixture;
let activities: Activities;
const victim = workflowOf('victim');
let victimToken: string;
let afterTurn: DigestState;

const allocation = (agentId: string, tenant: string, capability: string, operationId: string): AllocateRequest => ({
  agentId,
  tenant,
  capability,
  operationId,
  shape: MODELS.tiny!.shape,
  tokensPerBlock: MODELS.tiny!.tokensPerBlock,
  checkpoint: true,
});
const turn = (agentId: string, tenant: string, capability: string, operationId: string, before: DigestState): TurnRequest => ({
  agentId,
  tenant,
  capability,
  operationId,
  turn: 0,
  tokens: 24,
  before,
  checkpoint: false,
});

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-attack-journal-'));
  fx = await openMemory(dir);
  activities = activitiesOf(fx);
  victimToken = fx.token('victim');
  await as(victim, () => activities.placement.allocate(allocation('victim', 'acme', victimToken, 'victim:0')));
  afterTurn = (await as(victim, () => activities.holder.turn(turn('victim', 'acme', victimToken, 'victim:1', emptyDigest())))).digest;
});
afterAll(async () => {
  await fx?.close();
  rmSync(dir, { recursive: true, force: true });
});

// Each asks for operation victim:1 (the victim's recorded turn) of context 'victim'.
const REPLAYS: Intruder[] = [
  ...intrudersOf(
    () => fx,
    () => victimToken,
  ),
  {
    name: "the victim's workflow id with a token of another workflow (a later run)",
    caller: () => workflowOf('victim', 'run-2'),
    tenant: 'acme',
    capability: () => fx.token('victim', 'acme', { workflowId: 'kvagent-other' }),
    reason: 'wrong-workflow',
  },
];

describe('attack: replaying a recorded operation id', () => {
  it.each(REPLAYS)('$name: PERMISSION_DENIED ($reason), no recorded result, nothing changed, audited', async (replay) => {
    const before = { snapshot: fx.memory.snapshot('victim'), audits: denials(fx).length };
    const calls = fx.tierCalls.length;
    const request = turn('victim', replay.tenant, replay.capability(), 'victim:1', emptyDigest());
    const attempt = as({ ...replay.caller(), attempt: 2 }, () => activities.holder.turn(request));
    await expect(attempt).rejects.toMatchObject({ type: 'PERMISSION_DENIED' });
    const failure = (await attempt.catch((err: unknown) => err)) as Error;
    expect(failure.message).toContain(replay.reason);
    expect(failure.message).not.toContain(afterTurn.value);

    expect(fx.tierCalls.slice(calls)).toEqual([]); // nothing read, nothing written
    expect(fx.memory.snapshot('victim')).toEqual(before.snapshot);
    const audits = denials(fx).slice(before.audits);
    expect(audits).toHaveLength(1);
    expect(audits[0]).toMatchObject({ context: 'victim', action: 'turn', reason: replay.reason });
  });

  it("an allocation under the victim's id by another caller is refused and wipes none of the victim's records", async () => {
    const mallory = fx.token('mallory', 'globex');
    await expect(
      as(workflowOf('mallory'), () => activities.placement.allocate(allocation('victim', 'globex', mallory, 'victim:0'))),
    ).rejects.toMatchObject({
      type: 'PERMISSION_DENIED',
    });
    await expect(
      as(workflowOf('victim', 'run-9'), () =>
        activities.placement.allocate(
          allocation('victim', 'acme', fx.token('victim', 'acme', { workflowId: 'kvagent-other' }), 'victim:0'),
        ),
      ),
    ).rejects.toMatchObject({
      type: 'PERMISSION_DENIED',
    });
  });

  it("still answers the victim's own retry from the record, without applying the turn twice", async () => {
    const retry = await as({ ...victim, attempt: 2 }, () =>
      activities.holder.turn(turn('victim', 'acme', victimToken, 'victim:1', emptyDigest())),
    );
    expect(retry.alreadyApplied).toBe(false); // the recorded answer: applied again, it would say true
    expect(retry.digest).toEqual(afterTurn);
    expect(fx.memory.snapshot('victim').tokens).toBe(24);
  });
});

describe('attack: an agent id reused after a release', () => {
  it("gets a context of its own, in its own tenant, never the released agent's recorded answers", async () => {
    const first = workflowOf('reused', 'run-a');
    const old = fx.token('reused');
    await as(first, () => activities.placement.allocate(allocation('reused', 'acme', old, 'reused:0')));
    await as(first, () => activities.holder.turn(turn('reused', 'acme', old, 'reused:1', emptyDigest())));
    const release: ContextRequest = { agentId: 'reused', tenant: 'acme', capability: old, operationId: 'reused:2' };
    expect(await as(first, () => activities.holder.release(release))).toEqual({ releasedTokens: 24 });
    // The release's own retry is still answered (its token is revoked by then, its grant gone).
    expect(await as({ ...first, attempt: 2 }, () => activities.holder.release(release))).toEqual({ releasedTokens: 24 });

    // Another tenant starts an agent of the same id: same operation ids, a new workflow run.
    const second = workflowOf('reused', 'run-b');
    const fresh = fx.token('reused', 'globex', { epoch: Date.now() + 1000 }); // minted after the release's revocation
    const placed = await as(second, () => activities.placement.allocate(allocation('reused', 'globex', fresh, 'reused:0')));
    expect(placed).toMatchObject({ tokens: 0, blocks: 0 });
    const applied = await as(second, () => activities.holder.turn(turn('reused', 'globex', fresh, 'reused:1', emptyDigest())));
    expect(applied.alreadyApplied).toBe(false);
    expect(fx.memory.tenantStats('globex')).toMatchObject({ contexts: 1, tokens: 24 });
    // The old tenant's token is refused on the new context, whatever operation id it names.
    await expect(as({ ...first, attempt: 3 }, () => activities.holder.release(release))).rejects.toMatchObject({
      type: 'PERMISSION_DENIED',
    });
    expect(fx.memory.snapshot('reused').tokens).toBe(24);
  });

  it("forgets an ended context's operations: only the ending one is kept", async () => {
    const run = workflowOf('ending');
    const token = fx.token('ending');
    const journal = activitiesOf(fx);
    await as(run, () => journal.placement.allocate(allocation('ending', 'acme', token, 'ending:0')));
    await as(run, () => journal.holder.release({ agentId: 'ending', tenant: 'acme', capability: token, operationId: 'ending:1' }));
    // A retried allocate of the ended context is not answered from the record: admitted, and refused.
    await expect(
      as({ ...run, attempt: 2 }, () => journal.placement.allocate(allocation('ending', 'acme', token, 'ending:0'))),
    ).rejects.toMatchObject({
      type: 'PERMISSION_DENIED',
    });
    expect(fx.memory.holds('ending')).toBe(false);
  });
});
