// An AI SDK tool loop through kvfabric's model provider against the same loop through a provider that
// keeps no KV (test/support/plain-model-calls.ts: same engine, every call evaluates its whole prompt),
// with the real model (SmolLM2-135M on this machine's CPU), greedy. Each step's prompt is the step
// before's, plus the tool call the model made and the tool's result, as the AI SDK sends it: steps 1-9
// are forced calls of two tools in turn, step 10 answers with no tool (streamed). The conversation opens
// with a long user document so that the context is about 2k or 8k tokens. Per step: time to the first
// generated token, the call's time, the prompt tokens evaluated and reused, and whether the reply is the
// plain loop's. The two loops alternate step by step in one process, on one engine, which evaluates at
// most 32 tokens a pass (--batch-size; llama.cpp's default is 512): under 64, a continued context's KV is
// bit for bit a whole evaluation's on one thread (test/engines/batch-invariance.test.ts), so greedy
// replies can be compared to the character. Whole-prompt prefill is slower than at 512.
//   npx tsx bench/ai-sdk-loop.bench.ts [--tokens 2k,8k] [--plain-steps N] [--threads N] [--batch-size N] [--json build/bench/ai-sdk-loop.json]
// --plain-steps: the plain loop runs only its first N steps (default: all 10 at 2k, 2 at 8k, where each
// re-prefills about 7,300 tokens: about four minutes a step on 2 cores at 32 tokens a pass); kvfabric always runs all 10.
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type {
  JSONValue,
  LanguageModelV4CallOptions,
  LanguageModelV4Content,
  LanguageModelV4FunctionTool,
  LanguageModelV4Prompt,
  LanguageModelV4Usage,
} from '@ai-sdk/provider';
import { MockActivityEnvironment } from '@temporalio/testing';

import { CarriedReplyIds } from '../src/ai-sdk/carried-reply-ids';
import { KvFabricLanguageModel } from '../src/ai-sdk/kvfabric-language-model';
import { ModelCallMemory, type ModelCalls } from '../src/ai-sdk/model-call-memory';
import type { ModelCallOwner } from '../src/ai-sdk/model-call-owner';
import { chatMessagesOf, replyFormatOf } from '../src/ai-sdk/prompt-messages';
import type { Engine } from '../src/engines/engine';
import { LlamaEngine } from '../src/engines/llama/llama-engine';
import { MODELS } from '../src/engines/models';
import { NativeAllocator } from '../src/fabric';
import { PosixBlobStore } from '../src/blob-store/posix/posix-blob-store';
import { RecordSeal } from '../src/shared-directory/record-seal';
import { TenantRegistry } from '../src/shared-directory/tenant-registry';
import { ColdStore, KeyRing } from '../src/tiers/cold';
import { TieredMemory } from '../src/tiers/tiered-memory';
import { plainModelCalls } from '../test/support/plain-model-calls';
import { option, printTable } from './measure';

const STEPS = 10;
/** SmolLM2-135M's trained context: the 8k loop stays inside it. */
const TRAINED_CONTEXT = 8192;
/** What ten steps add to the first prompt (measured: 70-90 tokens a step, a call and its result) and the answer's room. */
const LOOP_ROOM = 896;
const TOOL_CALL_MAX_TOKENS = 48;
const ANSWER_MAX_TOKENS = 32;
const NAMESPACE = 'bench';

const sizes = (option('--tokens') ?? '2k,8k').split(',').map((label) => ({ label, tokens: tokensOf(label) }));
const plainStepsOption = option('--plain-steps');
const threads = Number(option('--threads') ?? Math.max(1, os.availableParallelism() - 1));
const batchSize = Number(option('--batch-size') ?? 32);
const jsonPath = option('--json');

/** `2k` is 2,048 tokens, `8k` the model's whole trained context (8,192); a bare number is itself. */
function tokensOf(label: string): number {
  return label.endsWith('k') ? Number(label.slice(0, -1)) * 1024 : Number(label);
}

/** The plain loop's steps at a size: all of them where a re-prefill is short, two at 8k, unless told. */
function plainStepsAt(tokens: number): number {
  if (plainStepsOption !== undefined) return Math.min(STEPS, Math.max(0, Number(plainStepsOption)));
  return tokens > 4096 ? 2 : STEPS;
}

// Enums only (integers included): llama.cpp's JSON grammar has no bounds for a number, and the small
// model's free integers run long.
const READ_SECTION: LanguageModelV4FunctionTool = {
  type: 'function',
  name: 'read_section',
  description: 'Reads one part of a section of the operations log.',
  inputSchema: {
    type: 'object',
    properties: {
      section: { type: 'integer', enum: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] },
      part: { type: 'string', enum: ['start', 'middle', 'end'] },
    },
    required: ['section', 'part'],
    additionalProperties: false,
  },
};
const COUNT_BLOCKS: LanguageModelV4FunctionTool = {
  type: 'function',
  name: 'count_blocks',
  description: 'Counts the blocks an agent stored in one tier.',
  inputSchema: {
    type: 'object',
    properties: {
      agent: { type: 'integer', enum: [1, 2, 3, 4, 5, 6, 7, 8] },
      tier: { type: 'string', enum: ['device', 'host', 'disk'] },
    },
    required: ['agent', 'tier'],
    additionalProperties: false,
  },
};
const TOOLS = [READ_SECTION, COUNT_BLOCKS];
const SYSTEM = 'You are an operations assistant. Inspect the log with the tools, one call at a time, then answer in one sentence.';
const QUESTION = 'Go through the log above with the tools, then tell me which tier holds most blocks.';

/** The tool's result, from its input only: the same call gets the same result in both loops. */
function toolResult(name: string, input: Record<string, unknown>): JSONValue {
  if (name === READ_SECTION.name) {
    const section = Number(input.section);
    return { section, part: String(input.part), lines: 3 + (section % 5), first: logLine(section * 7) };
  }
  const agent = Number(input.agent);
  return { agent, tier: String(input.tier), blocks: (agent * 37 + String(input.tier).length * 11) % 100 };
}

function logLine(i: number): string {
  return `Agent ${(i % 8) + 1} stored block ${i} of its context in tier ${['device', 'host', 'disk'][i % 3]}.`;
}

function documentOf(lines: number): string {
  const text: string[] = [];
  for (let i = 0; i < lines; i++) {
    if (i % 40 === 0) text.push(`\nSection ${Math.floor(i / 40) + 1}:`);
    text.push(logLine(i));
  }
  return text.join(' ');
}

function firstPrompt(lines: number): LanguageModelV4Prompt {
  return [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: [{ type: 'text', text: `Here is our cluster's operations log.\n${documentOf(lines)}\n\n${QUESTION}` }] },
  ];
}

/** One step's call: a forced call of the step's tool, or (the last step) an answer with no tool. */
function callOptions(prompt: LanguageModelV4Prompt, step: number): LanguageModelV4CallOptions {
  const answer = step === STEPS;
  return {
    prompt,
    tools: TOOLS,
    toolChoice: answer ? { type: 'none' } : { type: 'tool', toolName: TOOLS[(step - 1) % TOOLS.length]!.name },
    maxOutputTokens: answer ? ANSWER_MAX_TOKENS : TOOL_CALL_MAX_TOKENS,
    temperature: 0,
  };
}

/** The first prompt's tokens as the engine renders it (the tools block included). */
function renderedLength(engine: LlamaEngine, prompt: LanguageModelV4Prompt): number {
  const options = callOptions(prompt, 1);
  return engine.renderConversation(chatMessagesOf(prompt, replyFormatOf(options, []), () => undefined, [])).length;
}

/** The most log lines whose first prompt fits `target` tokens. */
function linesFor(engine: LlamaEngine, target: number): number {
  let low = 0;
  let high = 1;
  while (renderedLength(engine, firstPrompt(high)) <= target) high *= 2;
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2);
    if (renderedLength(engine, firstPrompt(mid)) <= target) low = mid;
    else high = mid;
  }
  return low;
}

/** What the runner saw of the call it ran last. */
interface RunnerCall {
  /** performance.now() of the first generated piece of text (a forced tool-call prefix is not one). */
  firstPieceAt?: number;
  /** The reply's text as the model wrote it (a tool call in its tags). */
  text: string;
  resumedFrom: string;
}

/**
 * The runner with a clock on it: it asks the engine for the reply's text as generated (the language model
 * asks only when the reply cannot be a tool call) and notes when the first generated piece came. The
 * engine tells a forced tool-call prefix before it evaluates anything: that piece is skipped.
 */
function clockedCalls(inner: ModelCalls): { calls: ModelCalls; last: () => RunnerCall } {
  let last: RunnerCall | undefined;
  const calls: ModelCalls = {
    carriedReplies: inner.carriedReplies,
    async complete(owner, request) {
      const forced = request.structured?.prefix.length ?? 0;
      let told = 0;
      let firstPieceAt: number | undefined;
      const result = await inner.complete(owner, {
        ...request,
        onText: (delta) => {
          told += delta.length;
          if (firstPieceAt === undefined && told > forced) firstPieceAt = performance.now();
          request.onText?.(delta);
        },
      });
      last = { ...(firstPieceAt !== undefined ? { firstPieceAt } : {}), text: result.text, resumedFrom: result.resumedFrom };
      return result;
    },
  };
  return {
    calls,
    last: () => {
      if (!last) throw new Error('no call ran');
      return last;
    },
  };
}

/**
 * The engine with a clock on complete(): when the runner handed the call to the engine, after the
 * provider turned the prompt into messages and (kvfabric) found the run's context and its shared prefix.
 */
function clockedEngine(engine: Engine): { engine: Engine; completeAt: () => number | undefined } {
  let completeAt: number | undefined;
  return {
    engine: {
      get fingerprint() {
        return engine.fingerprint;
      },
      needs: engine.needs,
      turn: (request) => engine.turn(request),
      renderConversation: (messages) => engine.renderConversation(messages),
      complete: (request) => {
        completeAt = performance.now();
        return engine.complete(request);
      },
      load: (key, context) => engine.load(key, context),
      save: (key, fromToken) => engine.save(key, fromToken),
      release: (key) => engine.release(key),
      close: () => engine.close(),
    },
    completeAt: () => completeAt,
  };
}

/** One step of one loop. */
export interface AiSdkLoopStep {
  step: number;
  /** The tool the step was made to call, or 'answer' (no tool, streamed). */
  kind: string;
  promptTokens: number;
  evaluatedTokens: number;
  reusedTokens: number;
  resumedFrom: string;
  /** From the call's start to its first generated token. */
  firstTokenMs: number;
  /** From the call's start to the engine's complete(): the provider's and the runner's own work. */
  beforeEngineMs: number;
  callMs: number;
  replyTokens: number;
  /** The reply's text as the model wrote it. */
  reply: string;
  /** The reply as the AI SDK gets it: the tool call (name, parsed input) or the answer's text. */
  result: string;
  /** kvfabric: waiting for the step before's write-behind (its KV into the pages), outside the timed call. */
  writeBehindMs?: number;
}

/** One context size's figures (the JSON's rows; bench/run-all.ts reads them). */
export interface AiSdkLoopRow {
  size: string;
  firstPromptTokens: number;
  lastPromptTokens: number;
  steps: number;
  /** The plain loop's steps: it stops early at large sizes (--plain-steps). */
  plainSteps: number;
  kvfabric: AiSdkLoopStep[];
  plain: AiSdkLoopStep[];
  /** Means over the steps both loops ran. */
  kvfabricFirstTokenMs: number;
  plainFirstTokenMs: number;
  /** plainFirstTokenMs / kvfabricFirstTokenMs. */
  firstTokenRatio: number;
  /** The same over steps 2 on (kvfabric continues its KV; step 1 evaluates the whole prompt both ways). */
  kvfabricLaterFirstTokenMs: number;
  plainLaterFirstTokenMs: number;
  laterFirstTokenRatio: number;
  kvfabricCallMs: number;
  plainCallMs: number;
  /** kvfabric's tokens evaluated per step after the first, mean. */
  kvfabricEvaluatedAfterFirst: number;
  plainEvaluatedMean: number;
  /** Every step both ran replied the same (tool call or answer), as the AI SDK reads the reply. */
  sameReplies: boolean;
  /** Every tool-call step both ran called the same tool with the same input. */
  sameToolCalls: boolean;
  /** kvfabric's time before the engine (steps 2 on), mean: what it adds to the engine's own. */
  kvfabricBeforeEngineMs: number;
  /** Steps both ran whose reply text was the same to the character (JSON spacing included). */
  sameTextSteps: number;
}

/** A loop as the AI SDK drives one: the prompt grows by each step's reply and the tool's result. */
class ToolLoop {
  readonly steps: AiSdkLoopStep[] = [];
  private prompt: LanguageModelV4Prompt;
  private readonly environment: MockActivityEnvironment;
  private readonly model: KvFabricLanguageModel;

  constructor(
    readonly name: string,
    private readonly clocked: ReturnType<typeof clockedCalls>,
    private readonly engineClock: () => number | undefined,
    readonly owner: ModelCallOwner,
    lines: number,
  ) {
    this.prompt = firstPrompt(lines);
    this.model = new KvFabricLanguageModel('kvfabric', () => clocked.calls);
    this.environment = new MockActivityEnvironment({
      namespace: owner.namespace,
      workflowNamespace: owner.namespace,
      workflowExecution: { workflowId: owner.workflowId, runId: owner.runId },
    });
  }

  async step(step: number): Promise<AiSdkLoopStep> {
    const options = callOptions(this.prompt, step);
    const answer = step === STEPS;
    const started = performance.now();
    let streamedAt: number | undefined;
    let content: LanguageModelV4Content[];
    let usage: LanguageModelV4Usage;
    if (answer) {
      // The answer streams, as streamText shows it: the first token is the first text delta read.
      const streamed = await this.inActivity(async () => {
        const { stream } = await this.model.doStream(options);
        let text = '';
        let finished: LanguageModelV4Usage | undefined;
        const reader = stream.getReader();
        for (let part = await reader.read(); !part.done; part = await reader.read()) {
          const value = part.value;
          if (value.type === 'text-delta') {
            streamedAt ??= performance.now();
            text += value.delta;
          } else if (value.type === 'finish') finished = value.usage;
          else if (value.type === 'error') throw value.error;
        }
        if (!finished) throw new Error('the stream did not finish');
        return { content: [{ type: 'text', text }] as LanguageModelV4Content[], usage: finished };
      });
      ({ content, usage } = streamed);
    } else {
      ({ content, usage } = await this.inActivity(() => this.model.doGenerate(options)));
    }
    const ended = performance.now();
    const seen = this.clocked.last();
    const firstAt = streamedAt ?? seen.firstPieceAt ?? ended;
    const record: AiSdkLoopStep = {
      step,
      kind: options.toolChoice?.type === 'tool' ? options.toolChoice.toolName : 'answer',
      promptTokens: usage.inputTokens.total ?? 0,
      evaluatedTokens: usage.inputTokens.noCache ?? 0,
      reusedTokens: usage.inputTokens.cacheRead ?? 0,
      resumedFrom: seen.resumedFrom,
      firstTokenMs: firstAt - started,
      beforeEngineMs: (this.engineClock() ?? started) - started,
      callMs: ended - started,
      replyTokens: usage.outputTokens.total ?? 0,
      reply: seen.text,
      result: resultOf(content),
    };
    this.steps.push(record);
    if (!answer) this.carryOn(content);
    return record;
  }

  /** Runs `call` as the owner's invokeModel activity would. */
  private inActivity<R>(call: () => Promise<R>): Promise<R> {
    return this.environment.run(call) as Promise<R>;
  }

  /** The reply and the tools' results into the next prompt, as the AI SDK writes them. */
  private carryOn(content: LanguageModelV4Content[]): void {
    const calls = content.filter((item) => item.type === 'tool-call');
    if (calls.length === 0) throw new Error(`${this.name}: step ${this.steps.length} made no tool call: ${JSON.stringify(content)}`);
    const assistant: Extract<LanguageModelV4Prompt[number], { role: 'assistant' }>['content'] = [];
    for (const item of content) {
      if (item.type === 'text') assistant.push({ type: 'text', text: item.text });
      else if (item.type === 'tool-call')
        assistant.push({ type: 'tool-call', toolCallId: item.toolCallId, toolName: item.toolName, input: JSON.parse(item.input) });
    }
    this.prompt = [
      ...this.prompt,
      { role: 'assistant', content: assistant },
      {
        role: 'tool',
        content: calls.map((call) => ({
          type: 'tool-result' as const,
          toolCallId: call.toolCallId,
          toolName: call.toolName,
          output: { type: 'json' as const, value: toolResult(call.toolName, JSON.parse(call.input)) },
        })),
      },
    ];
  }
}

/** A reply as the loop uses it: each tool call's name and input (spacing aside), and any text. */
function resultOf(content: LanguageModelV4Content[]): string {
  return JSON.stringify(
    content.map((item) => {
      if (item.type === 'tool-call') return { call: item.toolName, input: JSON.parse(item.input) };
      if (item.type === 'text') return { text: item.text };
      return { [item.type]: true };
    }),
  );
}

/** Whether a kvfabric step reused all the step before saw and said (its prompt and reply). */
const continuedAll = (before: AiSdkLoopStep, step: AiSdkLoopStep) => step.reusedTokens >= before.promptTokens + before.replyTokens;

const mean = (values: number[]) => (values.length === 0 ? Number.NaN : values.reduce((a, b) => a + b, 0) / values.length);
const ms = (value: number) => (value >= 10_000 ? `${(value / 1000).toFixed(1)} s` : `${value.toFixed(0)} ms`);
const ownerOf = (loop: string): ModelCallOwner => ({
  namespace: NAMESPACE,
  workflowId: `ai-sdk-loop-${loop}`,
  runId: randomUUID(),
  tenant: NAMESPACE,
});

function describeStep(loop: ToolLoop, size: string, s: AiSdkLoopStep): void {
  const waited = s.writeBehindMs !== undefined ? `, write-behind before it ${ms(s.writeBehindMs)}` : '';
  console.log(
    `  ${size} step ${s.step}/${STEPS} ${loop.name.padEnd(8)} ${s.kind.padEnd(12)} prompt ${s.promptTokens}, evaluated ${s.evaluatedTokens}, reused ${s.reusedTokens} (${s.resumedFrom}), first token ${ms(s.firstTokenMs)} (engine entered at ${ms(s.beforeEngineMs)}), call ${ms(s.callMs)}${waited}: ${JSON.stringify(s.reply)}`,
  );
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-ai-sdk-loop-'));
  const firstTargets = sizes.map((s) => Math.min(s.tokens, TRAINED_CONTEXT - LOOP_ROOM));
  const contextLength = Math.min(TRAINED_CONTEXT, Math.max(...firstTargets) + LOOP_ROOM);
  const engine = await LlamaEngine.open({
    contextLength,
    hotContexts: 2,
    threads,
    stateDir: dir,
    batchSize,
  });
  const blocks = Math.ceil(contextLength / MODELS['smollm2-135m']!.tokensPerBlock) * 2 + 8;
  const pool = new NativeAllocator({ shape: MODELS['smollm2-135m']!.shape, blockCount: blocks, hostBlockCount: blocks, backend: 'cpu' });
  const keyRing = new KeyRing([{ id: 'bench', key: randomBytes(32) }], 'bench');
  const cold = await ColdStore.open({ directory: path.join(dir, 'cold'), keyRing });
  const tiers = new TieredMemory({ pool, cold });
  const tenantIds = await TenantRegistry.open(await PosixBlobStore.open(dir), 'tenants/', new RecordSeal(keyRing));
  // One engine under both loops, with one clock: the loops never run at once.
  const clocks = clockedEngine(engine);
  const memory = new ModelCallMemory({
    tiers,
    cold,
    engine: clocks.engine,
    tenantIds,
    carriedReplies: new CarriedReplyIds(keyRing),
    onBackgroundError: (what, err) => console.error(`write-behind failed: ${what}:`, err),
  });
  const kept = clockedCalls(memory);
  const plain = clockedCalls(plainModelCalls(clocks.engine));
  console.log(
    `SmolLM2-135M on the CPU, ${threads} thread(s), engine context ${contextLength} tokens, ${batchSize} tokens a pass, greedy; ${STEPS} steps (1-${STEPS - 1} forced tool calls, ${STEPS} an answer streamed); kvfabric and the plain provider alternate step by step`,
  );

  // Warm-up (not measured): the engine's first call on each path allocates what later calls reuse.
  for (const [name, clocked] of [
    ['kvfabric', kept],
    ['plain', plain],
  ] as const) {
    const warm = new ToolLoop(name, clocked, clocks.completeAt, ownerOf(`warm-${name}`), 20);
    await warm.step(1);
    if (name === 'kvfabric') {
      await memory.settled();
      await memory.release(warm.owner);
    }
  }

  const rows: AiSdkLoopRow[] = [];
  for (const [i, size] of sizes.entries()) {
    const lines = linesFor(engine, firstTargets[i]!);
    const plainSteps = plainStepsAt(size.tokens);
    const kvLoop = new ToolLoop('kvfabric', kept, clocks.completeAt, ownerOf(`kvfabric-${size.label}`), lines);
    const plainLoop = new ToolLoop('plain', plain, clocks.completeAt, ownerOf(`plain-${size.label}`), lines);
    console.log(
      `\n${size.label}: first prompt ${renderedLength(engine, firstPrompt(lines))} tokens (${lines} log lines); the plain loop runs ${plainSteps} of ${STEPS} steps${plainSteps < STEPS ? ' (--plain-steps: each re-prefills the whole context)' : ''}`,
    );
    for (let step = 1; step <= STEPS; step++) {
      // The step before's KV goes into the pages behind its reply; the tool's run covers that in a real
      // loop. Waited for here, timed apart, so that it overlaps neither loop's call.
      const waitStarted = performance.now();
      await memory.settled();
      const writeBehindMs = performance.now() - waitStarted;
      const k = await kvLoop.step(step);
      if (step > 1) k.writeBehindMs = writeBehindMs;
      describeStep(kvLoop, size.label, k);
      if (step > plainSteps) continue;
      await memory.settled();
      console.log(`  ${size.label} step ${step}/${STEPS} plain    evaluating its whole prompt ...`);
      describeStep(plainLoop, size.label, await plainLoop.step(step));
    }
    await memory.settled();
    await memory.release(kvLoop.owner);

    const both = plainLoop.steps.length;
    const k = kvLoop.steps.slice(0, both);
    const p = plainLoop.steps;
    const row: AiSdkLoopRow = {
      size: size.label,
      firstPromptTokens: kvLoop.steps[0]!.promptTokens,
      lastPromptTokens: kvLoop.steps.at(-1)!.promptTokens,
      steps: STEPS,
      plainSteps: both,
      kvfabric: kvLoop.steps,
      plain: plainLoop.steps,
      kvfabricFirstTokenMs: mean(k.map((s) => s.firstTokenMs)),
      plainFirstTokenMs: mean(p.map((s) => s.firstTokenMs)),
      firstTokenRatio: mean(p.map((s) => s.firstTokenMs)) / mean(k.map((s) => s.firstTokenMs)),
      kvfabricLaterFirstTokenMs: mean(k.slice(1).map((s) => s.firstTokenMs)),
      plainLaterFirstTokenMs: mean(p.slice(1).map((s) => s.firstTokenMs)),
      laterFirstTokenRatio: mean(p.slice(1).map((s) => s.firstTokenMs)) / mean(k.slice(1).map((s) => s.firstTokenMs)),
      kvfabricCallMs: mean(k.map((s) => s.callMs)),
      plainCallMs: mean(p.map((s) => s.callMs)),
      kvfabricEvaluatedAfterFirst: mean(kvLoop.steps.slice(1).map((s) => s.evaluatedTokens)),
      plainEvaluatedMean: mean(p.map((s) => s.evaluatedTokens)),
      sameReplies: p.every((s, j) => s.result === k[j]!.result),
      sameToolCalls: p.every((s, j) => s.kind === 'answer' || s.result === k[j]!.result),
      kvfabricBeforeEngineMs: mean(kvLoop.steps.slice(1).map((s) => s.beforeEngineMs)),
      sameTextSteps: p.filter((s, j) => s.reply === k[j]!.reply).length,
    };
    rows.push(row);

    console.log('');
    printTable(
      [
        'step',
        'call',
        'prompt tokens',
        'first token kvfabric',
        'first token plain',
        'call kvfabric',
        'call plain',
        'evaluated kvfabric',
        'evaluated plain',
        'reused kvfabric',
        'kvfabric continued all before',
        'same reply',
      ],
      kvLoop.steps.map((s, j) => {
        const q = plainLoop.steps[j];
        return [
          String(s.step),
          s.kind,
          String(s.promptTokens),
          ms(s.firstTokenMs),
          q ? ms(q.firstTokenMs) : '-',
          ms(s.callMs),
          q ? ms(q.callMs) : '-',
          String(s.evaluatedTokens),
          q ? String(q.evaluatedTokens) : '-',
          String(s.reusedTokens),
          j === 0 ? '-' : String(continuedAll(kvLoop.steps[j - 1]!, s)),
          q ? `${q.result === s.result}${q.result === s.result && q.reply !== s.reply ? ' (spacing differs)' : ''}` : '-',
        ];
      }),
    );
    const over = `over the ${both} step(s) both ran${both < STEPS ? ` (plain stopped after ${both}: --plain-steps)` : ''}`;
    console.log(
      `${size.label}: mean time to first token ${over}: kvfabric ${ms(row.kvfabricFirstTokenMs)}, plain ${ms(row.plainFirstTokenMs)}: ${row.firstTokenRatio.toFixed(1)}x`,
    );
    if (both > 1)
      console.log(
        `${size.label}: mean time to first token over steps 2-${both} (kvfabric continues its KV): kvfabric ${ms(row.kvfabricLaterFirstTokenMs)}, plain ${ms(row.plainLaterFirstTokenMs)}: ${row.laterFirstTokenRatio.toFixed(1)}x`,
      );
    console.log(`${size.label}: mean call time ${over}: kvfabric ${ms(row.kvfabricCallMs)}, plain ${ms(row.plainCallMs)}`);
    console.log(
      `${size.label}: tokens evaluated per step: kvfabric ${kvLoop.steps.map((s) => s.evaluatedTokens).join(', ')} (steps 2-${STEPS} mean ${row.kvfabricEvaluatedAfterFirst.toFixed(0)}); plain ${plainLoop.steps.map((s) => s.evaluatedTokens).join(', ')}`,
    );
    console.log(
      `${size.label}: replies identical ${over} (tool calls and answer as the AI SDK reads them): ${row.sameReplies} (tool calls: ${row.sameToolCalls}); same text to the character: ${row.sameTextSteps} of ${both}`,
    );
    console.log(
      `${size.label}: kvfabric's own work before the engine (run's context, note, render, shared prefix), steps 2-${STEPS} mean: ${ms(row.kvfabricBeforeEngineMs)}`,
    );
  }

  if (jsonPath) {
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
    fs.writeFileSync(jsonPath, JSON.stringify({ threads, batchSize, contextLength, rows }, null, 2));
  }
  await memory.settled();
  await cold.close();
  await engine.close();
  pool.close();
  fs.rmSync(dir, { recursive: true, force: true });
  // The KV kvfabric continued must give the calls a fresh evaluation gives (greedy).
  if (rows.some((r) => !r.sameToolCalls)) process.exitCode = 1;
}

void main();
