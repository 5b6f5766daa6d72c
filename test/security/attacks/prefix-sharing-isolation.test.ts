// Attack: a tenant probes for another tenant's prompts through prefix sharing (vLLM's CVE-2025-46570:
// a hit's first token comes sooner than a miss's). Tenant "victim" holds its prompts on the worker;
// attackers send the very same prompts. Their first turns must look exactly like true misses (prompts
// nobody holds): the same tokens evaluated, none shared, for every probe, while the victim's own
// repeats hit. Evaluated-token counts make it deterministic; first-turn times are printed for the record.
// A salt cannot be forged or copied: it is never an input (the call names a tenant its capability must
// carry), and even a holder named directly is refused across tenants by the tier layer. The same through
// the AI SDK provider, whose tenant is the run's namespace (the server's, not the workflow's to choose).
import type { LanguageModelV4CallOptions } from '@ai-sdk/provider';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { openSharingMemory, SHARED, type SharingMemory } from '../../prefix-sharing/sharing-memory-fixture';
import type { ModelCallOwner } from '../../../src/ai-sdk/model-call-owner';
import { figuresOf, openSharingModelCalls, runOf } from '../../prefix-sharing/sharing-model-calls-fixture';

let opened: SharingMemory;

beforeAll(async () => {
  opened = await openSharingMemory('prefix-isolation');
});
afterAll(async () => {
  await opened?.close();
});

const PROBES = 4;
const victimPrompt = (i: number) => `${SHARED} Case ${i}: which header declares the allocator's leases?`;
const missPrompt = (i: number) => `Unshared ${i}: which header declares the allocator's leases? ${SHARED}`;

type Kind = 'hit' | 'cross-tenant' | 'miss';
interface Probe {
  kind: Kind;
  prompt: number;
  shared: number;
  evaluated: number;
  ms: number;
}

/** The median time of each kind of probe, in whole ms, for the record. */
function medians(probes: readonly { kind: Kind; ms: number }[]): string {
  const median = (kind: Kind) => {
    const times = probes
      .filter((p) => p.kind === kind)
      .map((p) => p.ms)
      .sort((a, b) => a - b);
    return times[Math.floor(times.length / 2)]!.toFixed(0);
  };
  return `hit ${median('hit')}, cross-tenant ${median('cross-tenant')}, miss ${median('miss')}`;
}

describe('prefix sharing across tenants (attack)', () => {
  it("cross-tenant probes of the victim's exact prompts are indistinguishable from misses", async () => {
    const held: { agentId: string; tenant: string; token: string }[] = [];
    const probe = async (kind: Kind, agentId: string, tenant: string, message: string): Promise<Probe> => {
      const started = performance.now();
      const { token } = await opened.firstTurn(agentId, tenant, message);
      const ms = performance.now() - started;
      held.push({ agentId, tenant, token });
      const figures = opened.prefills.get(agentId)!;
      return { kind, prompt: opened.promptOf(message).length, shared: figures.sharedTokens, evaluated: figures.evaluatedTokens, ms };
    };
    for (let i = 0; i < PROBES; i++) await probe('miss', `victim-${i}`, 'victim', victimPrompt(i)); // the victim's own first turns
    const probes: Probe[] = [];
    for (let i = 0; i < PROBES; i++) {
      // Each attacker and each miss in a tenant of its own, so nothing it sent before can be found.
      probes.push(await probe('cross-tenant', `attacker-${i}`, `attacker-${i}`, victimPrompt(i)));
      probes.push(await probe('miss', `stranger-${i}`, `stranger-${i}`, missPrompt(i)));
      probes.push(await probe('hit', `victim-again-${i}`, 'victim', victimPrompt(i)));
    }
    const unshared = (kind: Kind) =>
      probes.filter((p) => p.kind === kind).map((p) => ({ shared: p.shared, uncached: p.prompt - p.evaluated }));
    const misses = unshared('miss');
    expect(unshared('cross-tenant')).toEqual(misses);
    expect(new Set(misses.map((m) => JSON.stringify(m)))).toEqual(new Set([JSON.stringify({ shared: 0, uncached: 0 })]));
    for (const hit of probes.filter((p) => p.kind === 'hit')) {
      expect(hit.shared).toBeGreaterThanOrEqual(64);
      expect(hit.evaluated).toBe(hit.prompt - hit.shared);
    }
    console.log(`first-turn ms (median of ${PROBES}): ${medians(probes)}`);
    for (const { agentId, tenant, token } of held) await opened.release(agentId, tenant, token);
    expect(opened.fx.memory.stats().usedBlocks).toBe(0);
  });

  it("a call naming the victim's tenant is refused, and a holder named directly is refused across tenants", async () => {
    const { token } = await opened.firstTurn('victim-held', 'victim', victimPrompt(9));
    const holder = opened.fx.tiers.contextIds().find((id) => id.startsWith('prefix-'))!;
    expect(holder).toBeDefined();
    // The attacker's capability names its own tenant: claiming the victim's is refused before any lookup.
    const thief = opened.fx.token('thief', 'attacker');
    await opened.fx.allocate('thief', thief, { tenant: 'attacker' });
    await expect(opened.say('thief', thief, victimPrompt(9), { tenant: 'victim' })).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    // Below the keys: the tier layer refuses another tenant's holder whatever a lookup said.
    await expect(opened.fx.tiers.sharePrefix('thief', holder, 1, {})).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(opened.fx.tiers.contextStats('thief').tokens).toBe(0);
    await opened.release('thief', 'attacker', thief);
    await opened.release('victim-held', 'victim', token);
  });
});

describe('prefix sharing across tenants through the AI SDK provider (attack)', () => {
  it("another namespace's first calls with the victim's exact prompts share nothing, as misses", async () => {
    const calls = await openSharingModelCalls('prefix-isolation-ai-sdk');
    try {
      const ask = (system: string, question: string): LanguageModelV4CallOptions => ({
        prompt: [
          { role: 'system', content: system },
          { role: 'user', content: [{ type: 'text', text: question }] },
        ],
        maxOutputTokens: 1,
      });
      const victimAsk = (i: number) => ask(SHARED, `Case ${i}: which header declares the allocator's leases?`);
      const missAsk = (i: number) => ask(`Unshared ${i}. ${SHARED}`, `Case ${i}: which header declares the allocator's leases?`);
      const runs: ModelCallOwner[] = [];
      const probe = async (kind: Kind, namespace: string, id: string, options: LanguageModelV4CallOptions) => {
        const started = performance.now();
        const result = await calls.generate(runOf(namespace, id), options);
        runs.push(runOf(namespace, id));
        return { kind, ms: performance.now() - started, ...figuresOf(result) };
      };
      for (let i = 0; i < PROBES; i++) await probe('miss', 'victim', `victim-${i}`, victimAsk(i));
      const probes: Array<{ kind: Kind; ms: number; reused: number; evaluated: number; shared: number }> = [];
      for (let i = 0; i < PROBES; i++) {
        probes.push(await probe('cross-tenant', `attacker-${i}`, `attacker-${i}`, victimAsk(i)));
        probes.push(await probe('miss', `stranger-${i}`, `stranger-${i}`, missAsk(i)));
        probes.push(await probe('hit', 'victim', `victim-again-${i}`, victimAsk(i)));
      }
      const unshared = (kind: Kind) => probes.filter((p) => p.kind === kind).map(({ reused, shared }) => ({ reused, shared }));
      expect(unshared('cross-tenant')).toEqual(unshared('miss'));
      expect(new Set(unshared('miss').map((m) => JSON.stringify(m)))).toEqual(new Set([JSON.stringify({ reused: 0, shared: 0 })]));
      for (const hit of probes.filter((p) => p.kind === 'hit')) expect(hit.shared).toBeGreaterThanOrEqual(32);
      console.log(`AI SDK first-call ms (median of ${PROBES}): ${medians(probes)}`);
      for (const run of runs) await calls.memory.release(run);
      expect(calls.pool.stats().usedBlocks).toBe(0);
    } finally {
      await calls.close();
    }
  });
});
