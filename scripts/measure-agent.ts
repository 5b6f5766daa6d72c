// The agent's history figures, measured on this machine (npm run measure:agent): history events and bytes per
// hot turn (a turn on a resident agent, the issue's target: at most 6 events and 2 KiB), which kinds of
// events a turn adds, the history after 100 turns, and the end-to-end time from a resume update to a
// resumed, verified context, for Llama-3-8B-shaped contexts of several sizes on the warm (host) and cold
// (disk) tiers. Runs its own dev server and an in-process GPU worker that also runs the agent workflows.

import { startAgentRig } from '../bench/agent-rig';
import type { AgentHandle } from '../src/client/agent-client';
import { bytesPerTokenOf } from '../src/fabric/layout';
import { MODELS } from '../src/engines/models';

const LLAMA = MODELS['llama-3-8b']!;
const MiB = 1024 * 1024;
const CONTEXT_TOKENS = [1024, 4096, 8192];
const REPEATS = 3;

async function main(): Promise<void> {
  const { agents, close } = await startAgentRig({ name: 'measure', model: LLAMA, blocks: 1024 }); // 2 GiB each tier
  const hours = { timers: { idleToWarmMs: 3_600_000, warmToColdMs: 3_600_000 } };
  try {
    // ---- history: 100 turns; the first is not hot (it leaves `created`), the 99 after it are ----
    const chatty = await agents.start({ agentId: 'chatty', tenant: 'acme', model: LLAMA, config: hours });
    await chatty.turn(16);
    const handle = agents.workflow('chatty');
    const before = await handle.describe();
    for (let i = 1; i < 100; i++) await chatty.turn(16);
    const after = await handle.describe();
    const hotTurns = 99;
    const eventsPerTurn = (after.historyLength - before.historyLength) / hotTurns;
    const bytesPerTurn = ((after.historySize ?? 0) - (before.historySize ?? 0)) / hotTurns;
    console.log(
      `history after 100 turns: ${after.historyLength} events, ${after.historySize} bytes (${((after.historySize ?? 0) / 1024).toFixed(1)} KiB); ` +
        `KV appended: ${((100 * 16 * bytesPerTokenOf(LLAMA.shape)) / MiB).toFixed(0)} MiB`,
    );
    console.log(
      `events per turn: ${eventsPerTurn.toFixed(2)} (${eventKinds((await handle.fetchHistory()).events ?? [], before.historyLength, hotTurns)})`,
    );
    console.log(`bytes per turn: ${bytesPerTurn.toFixed(0)} (${(bytesPerTurn / 1024).toFixed(2)} KiB)`);
    console.log(
      `hot turn: ${eventsPerTurn.toFixed(2)} events, ${(bytesPerTurn / 1024).toFixed(2)} KiB of history per turn (target: <= 6 events, <= 2 KiB)`,
    );
    await chatty.release();

    // ---- resume update -> resumed, verified context ----
    console.log('\ncontext                  from   resume update -> resumed (median of 3)   worker: transfer + verify');
    for (const tokens of CONTEXT_TOKENS) {
      const agent = await agents.start({ agentId: `ctx-${tokens}`, tenant: 'acme', model: LLAMA, config: hours });
      for (let done = 0; done < tokens; done += 1024) await agent.turn(Math.min(1024, tokens - done));
      for (const tier of ['host', 'disk'] as const) {
        console.log(
          `${`${tokens} tokens (${((tokens * bytesPerTokenOf(LLAMA.shape)) / MiB).toFixed(0)} MiB)`.padEnd(24)} ${tier.padEnd(6)} ${await resumeFigures(agent, tier)}`,
        );
      }
      await agent.release();
    }
  } finally {
    await close();
  }
}

/** The kinds of events after the first `skip`, each as its count per turn: "workflowTaskScheduled 1.00, ...". */
function eventKinds(events: object[], skip: number, turns: number): string {
  const kinds = new Map<string, number>();
  for (const event of events.slice(skip)) {
    const kind = Object.keys(event).find((key) => key.endsWith('EventAttributes') && (event as Record<string, unknown>)[key]) ?? 'unknown';
    kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
  }
  return [...kinds].map(([kind, n]) => `${kind.replace('EventAttributes', '')} ${(n / turns).toFixed(2)}`).join(', ');
}

/** Median of REPEATS suspend -> resume round trips, as one line of the table. */
async function resumeFigures(agent: AgentHandle, tier: 'host' | 'disk'): Promise<string> {
  const samples: Array<{ total: number; transfer: number; verify: number }> = [];
  for (let i = 0; i < REPEATS; i++) {
    await agent.suspend(tier);
    const started = performance.now();
    const status = await agent.resume();
    const total = performance.now() - started;
    const { transferMs, verifyMs } = status.lastResume!;
    samples.push({ total, transfer: transferMs, verify: verifyMs });
  }
  samples.sort((a, b) => a.total - b.total);
  const m = samples[Math.floor(samples.length / 2)]!;
  return `${m.total.toFixed(0).padStart(8)} ms${''.padEnd(31)} ${m.transfer.toFixed(0)} + ${m.verify.toFixed(0)} ms`;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
