// Resume through Temporal with a real model (the llama engine's default, SmolLM2-135M, on this machine's
// CPU) against re-prefilling the same context with the same model, in one run. For each context size an
// agent's first turn is a message of about that many tokens (its prefill, timed through the turn update,
// one reply token); then, from host memory and from disk, the agent is suspended and resumed (timed: the
// resume update until its result) and takes one more one-token turn, whose engine loads the context
// from kvfabric's pages: resume + that turn is "back to a ready sequence that has answered". A hot turn
// of the same size (nothing to load) is measured too, so the load's own share is visible.
//   npm run bench:agent -- [--tokens 512,2k,8k] [--repeats 3] [--json FILE]
import fs from 'node:fs';
import path from 'node:path';

import type { AgentHandle } from '../src/client/agent-client';
import { startAgentRig } from './agent-rig';
import { median, modelContextSizes, option, printTable } from './measure';

const sizes = modelContextSizes(option('--tokens') ?? '512,2k,8k');
const repeats = Number(option('--repeats') ?? '3');
const jsonPath = option('--json');
/** The model's trained context: an 8k context plus the probe turns fit. */
const CONTEXT_LENGTH = 8192;
const ONE_TOKEN = { maxTokens: 1 };
const PROBE = 'Go on.';
/** Model turns take seconds to minutes on two cores. */
const CONFIG = { timers: { idleToWarmMs: 3_600_000, warmToColdMs: 3_600_000 }, timeouts: { attemptMs: 900_000, operationMs: 1_800_000 } };

export interface AgentResumeRow {
  tokens: number;
  kvBytes: number;
  prefillMs: number;
  hotTurnMs: number;
  from: 'host' | 'disk';
  resumeMs: number;
  /** The one-token turn right after the resume: the engine loads the context from the pages first. */
  firstTurnMs: number;
  /** prefill / (resume + first turn). */
  ratio: number;
  repeats: number;
}

async function timed<T>(work: () => Promise<T>): Promise<[T, number]> {
  const started = performance.now();
  const value = await work();
  return [value, performance.now() - started];
}

/** Distinct sentences (no repetition a tokenizer could fold), `count` of them. */
function notes(count: number): string {
  const lines: string[] = [];
  for (let i = 0; i < count; i++)
    lines.push(`Inspection ${i + 1}: deck section ${(i * 7) % 97} passed on day ${(i * 13) % 31}, crew ${(i * 5) % 17}.`);
  return lines.join(' ');
}

async function main(): Promise<void> {
  console.log(`agent resume through Temporal vs re-prefill, real model, sizes ${sizes.join(', ')}, ${repeats} repeats`);
  const rig = await startAgentRig({ name: 'agent-resume-bench', engine: 'llama', contextLength: CONTEXT_LENGTH, blocks: 2048 });
  const rows: AgentResumeRow[] = [];
  try {
    // Tokens per sentence, from a probe turn's prompt count (the chat template adds a few of its own).
    const probe = await rig.agents.start({ agentId: 'probe', tenant: 'bench', config: CONFIG });
    const measured = await probe.turn({ message: notes(40), generation: ONE_TOKEN });
    const perSentence = (measured.reply!.promptTokens - 10) / 40;
    await probe.release();

    for (const size of sizes) {
      const agent: AgentHandle = await rig.agents.start({ agentId: `agent-${size}`, tenant: 'bench', config: CONFIG });
      process.stdout.write(`  ${size} tokens: prefill...`);
      // Room is left for the probe turns that follow (3 hot, 6 after resumes, about a dozen tokens each).
      const target = Math.min(size, CONTEXT_LENGTH - 300) - 40;
      const [first, prefillMs] = await timed(() =>
        agent.turn({ message: notes(Math.max(1, Math.floor(target / perSentence))), generation: ONE_TOKEN }),
      );
      process.stdout.write(` ${(prefillMs / 1000).toFixed(1)} s (${first.tokens} tokens);`);
      const hot: number[] = [];
      for (let i = 0; i < repeats; i++) hot.push((await timed(() => agent.turn({ message: PROBE, generation: ONE_TOKEN })))[1]);
      for (const from of ['host', 'disk'] as const) {
        const resumes: number[] = [];
        const firstTurns: number[] = [];
        for (let i = 0; i < repeats; i++) {
          await agent.suspend(from);
          resumes.push((await timed(() => agent.resume()))[1]);
          firstTurns.push((await timed(() => agent.turn({ message: PROBE, generation: ONE_TOKEN })))[1]);
        }
        const status = await agent.status();
        const resumeMs = median(resumes);
        const firstTurnMs = median(firstTurns);
        rows.push({
          tokens: status.tokens,
          kvBytes: status.lastResume?.bytes ?? 0,
          prefillMs,
          hotTurnMs: median(hot),
          from,
          resumeMs,
          firstTurnMs,
          ratio: prefillMs / (resumeMs + firstTurnMs),
          repeats,
        });
        process.stdout.write(` ${from} ${resumeMs.toFixed(0)} + ${firstTurnMs.toFixed(0)} ms;`);
      }
      process.stdout.write('\n');
      await agent.release();
    }
  } finally {
    await rig.close();
  }
  printTable(
    ['tokens', 'KV', 'from', 'prefill (turn)', 'resume update', 'first turn after', 'hot turn', 'prefill / (resume + first turn)'],
    rows.map((r) => [
      String(r.tokens),
      `${(r.kvBytes / 2 ** 20).toFixed(1)} MiB`,
      r.from,
      `${(r.prefillMs / 1000).toFixed(2)} s`,
      `${r.resumeMs.toFixed(0)} ms`,
      `${r.firstTurnMs.toFixed(0)} ms`,
      `${r.hotTurnMs.toFixed(0)} ms`,
      `${r.ratio.toFixed(1)}x`,
    ]),
  );
  if (jsonPath) {
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
    fs.writeFileSync(jsonPath, JSON.stringify({ rows }, null, 2));
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
