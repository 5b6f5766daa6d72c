// The agent's history figures, measured on this machine (npm run measure:agent): history events per agent turn,
// history size after 100 turns, and the end-to-end time from a resume update to a resumed, verified
// context, for Llama-3-8B-shaped contexts of several sizes on the warm (host) and cold (disk) tiers.
// Runs its own dev server and an in-process GPU worker.

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
    // ---- history: 100 turns ----
    const chatty = await agents.start({ agentId: 'chatty', tenant: 'acme', model: LLAMA, config: hours });
    await chatty.turn(16);
    const before = await agents.workflow('chatty').describe();
    for (let i = 1; i < 100; i++) await chatty.turn(16);
    const after = await agents.workflow('chatty').describe();
    console.log(
      `history after 100 turns: ${after.historyLength} events, ${after.historySize} bytes (${((after.historySize ?? 0) / 1024).toFixed(1)} KiB)`,
    );
    console.log(
      `events per turn: ${((after.historyLength - before.historyLength) / 99).toFixed(2)}; KV appended: ${((100 * 16 * bytesPerTokenOf(LLAMA.shape)) / MiB).toFixed(0)} MiB`,
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
