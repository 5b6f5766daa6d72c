// Planned wake-ups (docs/agents.md#planned-wake-ups): the first call after a planned pause of an agent, three
// ways, alternated in one run on one agent per size, so that the three columns share the machine's moods:
//   resident   the agent never left the engine: the call after the pause;
//   cold       the agent was suspended to disk and nobody planned its wake-up: the call after the pause
//              brings the context back on its own path (today's resume from disk, then the turn);
//   woken      suspended to disk, then its wake-up planned through the client (AgentHandle.wake) at the end
//              of the pause: the agent's workflow brings the context back on its own, and the call at the
//              planned instant finds it in the engine.
// The pause is the same for the three: the agent's lead time (the status' wake.leadMs) and a second, the
// shortest a plan can be honoured in (a workflow, a worker and a connection idle as long in each case).
// The call is a one-token turn: with the real model (SmolLM2-135M on this machine's CPU) a short message and
// one reply token, with the synthetic engine of the Llama-3-8B shape (128 KiB of KV per token) one token.
// Before the samples, one suspend to disk and resume apart: the engine's memory grows then, once, and the
// workflow learns the agent's restore throughput, which the lead time is made of (src/workflows/lead-time.ts).
// The target: woken within resident x 1.1, judged pair by pair (each woken call against the resident call
// of its own round), the median of the differences deciding. Beside the times, the events each call added
// to the agent's history (read after the call, outside its time): a woken call should add a resident one's.
//   npx tsx bench/wake-up.bench.ts [--model-tokens 2k,8k] [--llama-tokens 8k,32k] [--repeats 5] [--json FILE]
// An empty list (--model-tokens '') leaves that engine out; a Llama-3-8B size whose device and host pools do
// not both fit in memory is left out with a note.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import type { AgentHandle } from '../src/client/agent-client';
import { modelFile } from '../src/engines/llama/default-model';
import { readModelInfo } from '../src/engines/llama/gguf-shape';
import { loadNodeLlamaCpp } from '../src/engines/llama/node-llama-cpp';
import { MODELS } from '../src/engines/models';
import { bytesPerTokenOf } from '../src/fabric/layout';
import { DEFAULT_TENANT_QUOTA_SHARES } from '../src/tiers/tenant-quotas';
import { messageOf } from './agent-resume.bench';
import { startAgentRig, type AgentRig } from './agent-rig';
import { dropPageCache, median, modelContextSizes, option, printTable, signedMs } from './measure';
import { parseTokens } from './resume.bench';

const sizesOf = (flag: string, fallback: string, parse: (text: string) => number[]) => {
  const text = option(flag) ?? fallback;
  return text.trim() === '' ? [] : parse(text);
};
const modelSizes = sizesOf('--model-tokens', '2k,8k', modelContextSizes);
const llamaSizes = sizesOf('--llama-tokens', '8k,32k', parseTokens);
const repeats = Number(option('--repeats') ?? '5');
const jsonPath = option('--json');
const LLAMA = MODELS['llama-3-8b']!;
/** The model's trained context: an 8k context plus the rounds' turns fit. */
const CONTEXT_LENGTH = 8192;
/** The target: a call after a planned wake-up within this many times an already-resident call's. */
const WAKE_FACTOR = 1.1;
/** From the plan to the instant: the lead time and this much more, so the prefetch's timer is in the future. */
const PLAN_SLACK_MS = 1000;
const PROBE = 'Go on.';
const ONE_TOKEN = { maxTokens: 1 };
/** No idle timer within the run; model turns take minutes at 8k on two cores. */
const CONFIG = { timers: { idleToWarmMs: 3_600_000, warmToColdMs: 3_600_000 }, timeouts: { attemptMs: 900_000, operationMs: 1_800_000 } };
const THREADS = Math.max(1, os.availableParallelism() - 1);
const notes: string[] = [];

export interface WakeUpRow {
  engine: 'real model' | 'Llama-3-8B shape';
  /** The context size asked for, and the context's length at the first round. */
  size: number;
  tokens: number;
  kvBytes: number;
  /** Medians of the rounds: the call on the resident agent, after a suspend to disk, at a planned wake-up. */
  residentMs: number;
  coldMs: number;
  wokenMs: number;
  /** The lead time the workflow planned with; each call came after a pause of this and PLAN_SLACK_MS. */
  leadMs: number;
  /** Rounds whose context was on the device at the planned instant (status read there, before the call). */
  onDeviceAtInstant: number;
  /** Rounds whose woken call resumed nothing on its path (the status' lastResume unchanged by it). */
  callsWithoutResume: number;
  /** Each round's three calls. */
  rounds: Array<{ residentMs: number; coldMs: number; wokenMs: number }>;
  /** The kinds of the events each resident and each woken call added to the history, by distinct list. */
  residentEvents: string[];
  wokenEvents: string[];
  /** Over the rounds, the median of woken - WAKE_FACTOR x resident: the target's judge. */
  overBoundMs: number;
  withinTarget: boolean;
  repeats: number;
}

/** The kinds of the events in the agent's history, in order. */
async function eventKinds(rig: AgentRig, agent: AgentHandle): Promise<string[]> {
  const { events } = await rig.agents.workflow(agent.agentId).fetchHistory();
  return (events ?? []).map(
    (event) =>
      Object.keys(event)
        .find((key) => key.endsWith('EventAttributes'))
        ?.replace('EventAttributes', '') ?? '?',
  );
}

async function timed<T>(work: () => Promise<T>): Promise<[T, number]> {
  const started = performance.now();
  const value = await work();
  return [value, performance.now() - started];
}

/** One engine's agents, and their call. */
interface Subject {
  engine: WakeUpRow['engine'];
  rig: AgentRig;
  kvBytesPerToken: number;
  call(agent: AgentHandle): Promise<unknown>;
  /** An agent whose context holds about `size` tokens. */
  agentOf(size: number): Promise<AgentHandle>;
  close(): Promise<void>;
}

async function realModel(): Promise<Subject> {
  const rig = await startAgentRig({ name: 'wake-bench-model', engine: 'llama', contextLength: CONTEXT_LENGTH, blocks: 2048 });
  const call = (agent: AgentHandle) => agent.turn({ message: PROBE, generation: ONE_TOKEN });
  // The model's tokenizer sizes the first message; a probe agent says what the chat template adds to it and one call to a context.
  const nlc = await loadNodeLlamaCpp();
  const llama = await nlc.getLlama({ gpu: false, build: 'never', logLevel: nlc.LlamaLogLevel.error, progressLogs: false });
  const tokenizer = await llama.loadModel({ modelPath: modelFile(), vocabOnly: true });
  const probe = await rig.agents.start({ agentId: 'probe', tenant: 'bench', config: CONFIG });
  const probeMessage = messageOf(tokenizer, 400);
  const first = await probe.turn({ message: probeMessage, generation: ONE_TOKEN });
  const templateTokens = first.tokens - tokenizer.tokenize(probeMessage).length;
  const perCall = (await call(probe)).tokens - first.tokens;
  await probe.release();
  return {
    engine: 'real model',
    rig,
    kvBytesPerToken: bytesPerTokenOf((await readModelInfo(modelFile())).shape),
    call,
    async agentOf(size) {
      const agent = await rig.agents.start({ agentId: `model-${size}`, tenant: 'bench', config: CONFIG });
      // Room for the rounds' calls and the one apart after the prefill.
      const contextTokens = Math.min(size, CONTEXT_LENGTH - perCall * (3 * repeats + 2) - 16);
      const message = messageOf(tokenizer, contextTokens - templateTokens);
      const [prefill, ms] = await timed(() => agent.turn({ message, generation: ONE_TOKEN }));
      process.stdout.write(` prefill ${(ms / 1000).toFixed(1)} s (${prefill.tokens} tokens);`);
      return agent;
    },
    async close() {
      await tokenizer.dispose();
      await rig.close();
    },
  };
}

async function llamaShape(sizes: number[]): Promise<Subject> {
  // The bench's one tenant may hold only its device share of the pool (tenant-quotas.ts): size the pool so that share fits it.
  const blocks = Math.ceil((Math.ceil(Math.max(...sizes) / LLAMA.tokensPerBlock) + 64) / DEFAULT_TENANT_QUOTA_SHARES.device);
  const rig = await startAgentRig({ name: 'wake-bench-llama', model: LLAMA, blocks });
  return {
    engine: 'Llama-3-8B shape',
    rig,
    kvBytesPerToken: bytesPerTokenOf(LLAMA.shape),
    call: (agent) => agent.turn(1),
    async agentOf(size) {
      const agent = await rig.agents.start({ agentId: `llama-${size}`, tenant: 'bench', model: LLAMA, config: CONFIG });
      for (let done = 0; done < size; done += 1024) await agent.turn(Math.min(1024, size - done));
      return agent;
    },
    close: () => rig.close(),
  };
}

async function measure(subject: Subject, size: number): Promise<WakeUpRow> {
  process.stdout.write(`  ${subject.engine}, ${size} tokens:`);
  const { rig, call } = subject;
  const agent = await subject.agentOf(size);
  const tokens = (await agent.status()).tokens;
  const toDisk = async () => {
    await agent.suspend('disk');
    if (!dropPageCache()) noteOnce('could not drop the page cache (needs root): reads from disk may come from memory');
  };
  // Apart: the engine's memory grows to the context's size once, and the workflow learns the restore's speed.
  await toDisk();
  await agent.resume();
  const learned = (await agent.status()).lastResume;
  await call(agent);
  // The lead the workflow plans with (a plan far ahead, read and cancelled), and the pause it allows.
  const leadMs = (await agent.wake(Date.now() + 3_600_000)).wake!.leadMs;
  if (learned) {
    const { bytes, transferMs, verifyMs, engineLoadMs } = learned;
    noteOnce(
      `${subject.engine} ${size}: the lead of ${leadMs} ms was learned from the resume apart: ${(bytes / 2 ** 20).toFixed(1)} MiB, ` +
        `moved in ${transferMs.toFixed(0)} ms, checked in ${verifyMs.toFixed(0)} ms, loaded into the engine in ${engineLoadMs.toFixed(0)} ms`,
    );
  }
  await agent.wake(null);
  const pauseMs = leadMs + PLAN_SLACK_MS;
  const rounds: WakeUpRow['rounds'] = [];
  let onDeviceAtInstant = 0;
  let callsWithoutResume = 0;
  const residentEvents = new Set<string>();
  const wokenEvents = new Set<string>();
  /** The events `work` adds to the history, as one line. */
  const addedBy = async (work: () => Promise<number>): Promise<[number, string]> => {
    const before = (await eventKinds(rig, agent)).length;
    const ms = await work();
    return [ms, (await eventKinds(rig, agent)).slice(before).join(' ')];
  };
  for (let i = 0; i < repeats; i++) {
    // The resident call comes in as the woken one does: after the pause, a status read, the worker's
    // write-behind waited for, then the history read that counts its events. Until 2026-12-07 only the
    // woken call came right after those reads, the resident one right after a sleep.
    await rig.settled();
    await sleep(pauseMs);
    await agent.status();
    await rig.settled();
    const [residentMs, residentAdded] = await addedBy(async () => (await timed(() => call(agent)))[1]);
    residentEvents.add(residentAdded);

    await rig.settled();
    await toDisk();
    await sleep(pauseMs);
    const coldMs = (await timed(() => call(agent)))[1];
    const afterCold = await agent.status();
    if (afterCold.lastResume?.from !== 'disk')
      throw new Error(`the call after a suspend to disk resumed from ${afterCold.lastResume?.from}`);

    await rig.settled();
    await toDisk();
    const at = Date.now() + pauseMs;
    const planned = await agent.wake(at);
    if (planned.wake?.leadMs !== leadMs) noteOnce(`${subject.engine} ${size}: the lead moved from ${leadMs} to ${planned.wake?.leadMs} ms`);
    await sleep(Math.max(0, at - Date.now()));
    const atInstant = await agent.status();
    if (atInstant.tier === 'device') onDeviceAtInstant++;
    await rig.settled();
    const [wokenMs, wokenAdded] = await addedBy(async () => (await timed(() => call(agent)))[1]);
    wokenEvents.add(wokenAdded);
    if (JSON.stringify((await agent.status()).lastResume) === JSON.stringify(atInstant.lastResume)) callsWithoutResume++;
    rounds.push({ residentMs, coldMs, wokenMs });
    process.stdout.write(` ${residentMs.toFixed(0)}/${coldMs.toFixed(0)}/${wokenMs.toFixed(0)}`);
  }
  await agent.release();
  const overBoundMs = median(rounds.map((r) => r.wokenMs - WAKE_FACTOR * r.residentMs));
  const row: WakeUpRow = {
    engine: subject.engine,
    size,
    tokens,
    kvBytes: tokens * subject.kvBytesPerToken,
    residentMs: median(rounds.map((r) => r.residentMs)),
    coldMs: median(rounds.map((r) => r.coldMs)),
    wokenMs: median(rounds.map((r) => r.wokenMs)),
    leadMs,
    onDeviceAtInstant,
    callsWithoutResume,
    rounds,
    residentEvents: [...residentEvents],
    wokenEvents: [...wokenEvents],
    overBoundMs,
    withinTarget: overBoundMs <= 0,
    repeats,
  };
  process.stdout.write(` ms (resident/cold/woken); lead ${leadMs} ms, on the device at the instant ${onDeviceAtInstant}/${repeats}\n`);
  return row;
}

function noteOnce(note: string): void {
  if (!notes.includes(note)) notes.push(note);
}

async function main(): Promise<void> {
  console.log(
    `first call after a planned pause (resident / cold / woken), real model ${modelSizes.join(', ') || '-'}, ` +
      `Llama-3-8B shape ${llamaSizes.join(', ') || '-'}, ${repeats} rounds each, ${THREADS} model thread(s)`,
  );
  const rows: WakeUpRow[] = [];
  if (modelSizes.length > 0) {
    const subject = await realModel();
    try {
      for (const size of modelSizes) rows.push(await measure(subject, size));
    } finally {
      await subject.close();
    }
  }
  // A worker holds device and host pools of the context's size: sizes that do not fit are left out.
  const fits = (tokens: number) => (2 * tokens * bytesPerTokenOf(LLAMA.shape)) / DEFAULT_TENANT_QUOTA_SHARES.device <= 0.7 * os.totalmem();
  for (const tokens of llamaSizes.filter((t) => !fits(t)))
    noteOnce(`Llama-3-8B shape: ${tokens / 1024}k left out: a worker's device and host pools of that size do not fit here`);
  const fitting = llamaSizes.filter(fits);
  if (fitting.length > 0) {
    const subject = await llamaShape(fitting);
    try {
      for (const size of fitting) rows.push(await measure(subject, size));
    } finally {
      await subject.close();
    }
  }
  console.log();
  printTable(
    [
      'engine',
      'tokens',
      'KV',
      'resident',
      'cold (resume from disk on the way)',
      'woken',
      'lead',
      'on device at instant',
      'woken - 1.1x resident',
      'target',
    ],
    rows.map((r) => [
      r.engine,
      String(r.tokens),
      `${(r.kvBytes / 2 ** 20).toFixed(1)} MiB`,
      `${r.residentMs.toFixed(0)} ms`,
      `${r.coldMs.toFixed(0)} ms`,
      `${r.wokenMs.toFixed(0)} ms`,
      `${(r.leadMs / 1000).toFixed(1)} s`,
      `${r.onDeviceAtInstant}/${r.repeats}`,
      signedMs(r.overBoundMs),
      r.withinTarget ? 'within' : 'over',
    ]),
  );
  for (const r of rows) {
    const count = (lists: string[]) => lists.map((list) => list.split(' ').length).join(' or ');
    console.log(`events a call added, ${r.engine} ${r.tokens}: resident ${count(r.residentEvents)} (${r.residentEvents.join(' | ')})`);
    console.log(`  woken ${count(r.wokenEvents)} (${r.wokenEvents.join(' | ')})`);
  }
  for (const note of notes) console.log(`note: ${note}`);
  if (jsonPath) {
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
    fs.writeFileSync(jsonPath, JSON.stringify({ threads: THREADS, rows, notes }, null, 2));
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
