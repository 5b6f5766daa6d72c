// Attack: a tenant times its first call against another tenant's prefill. A first call waits while another
// first call prefills the same prefix (PrefixSharing: a fleet prefills it once), so a wait that crossed
// tenants would tell the attacker that the victim is prefilling this very prompt now. The wait is keyed
// by the prompt's block keys, salted per tenant by the workers, so another tenant's call never waits for
// the victim's; a call of the victim's own tenant does, until the victim's prefill publishes or fails.
// Driven step by step on the real model's worker memory: deterministic, no timing in the verdict.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { openSharingMemory, SHARED, type SharingMemory } from '../../prefix-sharing/sharing-memory-fixture';

let opened: SharingMemory;

beforeAll(async () => {
  opened = await openSharingMemory('prefill-wait');
});
afterAll(async () => {
  await opened?.close();
});

/** Whether `promise` settles within a few event-loop turns (it waits for nothing). */
async function settlesAtOnce(promise: Promise<unknown>): Promise<boolean> {
  const pending = Symbol('pending');
  const tick = new Promise((resolve) => setTimeout(() => resolve(pending), 200));
  return (await Promise.race([promise.then(() => true), tick])) !== pending;
}

describe("a first call's wait for another's prefill (attack)", () => {
  it("never waits for another tenant's prefill of the very same prompt; waits for its own tenant's until it ends", async () => {
    const sharing = opened.fx.memory.prefixSharing!;
    const { tiers } = opened.fx;
    const prompt = opened.promptOf(`${SHARED} Which file holds the leases?`);
    const context = (id: string, tenant: number) => {
      tiers.create(id, tenant);
      return id;
    };
    // The victim's first call has taken nothing and is prefilling (its publish has not come yet).
    const victim = await sharing.take(context('wait-victim', 101), 'victim', prompt);
    expect(victim.shared).toBe(0);

    // Another tenant, the very same prompt: no wait, nothing shared.
    const attacker = sharing.take(context('wait-attacker', 102), 'attacker', prompt);
    expect(await settlesAtOnce(attacker)).toBe(true);
    expect((await attacker).shared).toBe(0);

    // The victim's own tenant waits for the victim's prefill...
    const colleague = sharing.take(context('wait-colleague', 101), 'victim', prompt);
    expect(await settlesAtOnce(colleague)).toBe(false);
    // ...which fails here: the colleague goes on and prefills (nothing was published).
    await sharing.abandon('wait-victim');
    expect((await colleague).shared).toBe(0);

    for (const id of ['wait-victim', 'wait-attacker', 'wait-colleague']) {
      await sharing.abandon(id);
      await tiers.release(id);
    }
  });
});
