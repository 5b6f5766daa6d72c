// Workflow code of the AI SDK tests: the example's research agent (examples/ai-sdk/workflows.ts: its
// tools) with the knobs tests turn (steps, system prompt, call timeout), its model calls running as
// @temporalio/ai-sdk's invokeModel activity. The first steps are asked to call a tool (the test model is
// small: left to choose, it rarely does) and the last to answer; and the workflows of the release,
// cancellation and idle tests.
import { TemporalProvider } from '@temporalio/ai-sdk/workflow';
import type { Duration } from '@temporalio/common';
import { CancellationScope, condition, defineQuery, defineSignal, isCancellation, setHandler, sleep } from '@temporalio/workflow';
import { generateText, stepCountIs, type LanguageModelUsage, type ProviderMetadata } from 'ai';

import { researchTools as tools } from '../../examples/ai-sdk/workflows';

import { releaseModelMemory, sleepThenWakeModelMemory, type ModelMemoryWake } from '../../src/workflows/model-memory';

export interface LoopStep {
  text: string;
  toolCalls: Array<{ toolName: string; input: unknown }>;
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  reusedTokens: number | undefined;
  evaluatedTokens: number | undefined;
  /** Where the call's KV came from: 'hot' in the engine, 'stored' pages, or 'empty'. */
  resumedFrom: unknown;
}

/** A model call's figures, as the tests read them: a step of a loop, or a one-step generateText. */
function loopStepOf(call: {
  text: string;
  toolCalls: ReadonlyArray<{ toolName: string; input: unknown }>;
  usage: LanguageModelUsage;
  providerMetadata?: ProviderMetadata;
}): LoopStep {
  return {
    text: call.text,
    toolCalls: call.toolCalls.map((c) => ({ toolName: c.toolName, input: c.input })),
    inputTokens: call.usage.inputTokens,
    outputTokens: call.usage.outputTokens,
    reusedTokens: call.usage.inputTokenDetails.cacheReadTokens,
    evaluatedTokens: call.usage.inputTokenDetails.noCacheTokens,
    resumedFrom: call.providerMetadata?.kvfabric?.resumedFrom,
  };
}

export interface ResearchRequest {
  /** `kvfabric`, or another id the worker's provider serves. */
  modelId: string;
  question: string;
  /** Model calls: search and read in turn, then an answer. */
  steps: number;
  /** Another system prompt (a test of a departing conversation). */
  system?: string;
  /** A model call's start-to-close timeout: how soon a call lost with its worker runs again elsewhere. */
  callTimeout?: Duration;
}

export async function researchAgent(request: ResearchRequest): Promise<LoopStep[]> {
  const { modelId, question, steps } = request;
  const provider = new TemporalProvider({ languageModel: { startToCloseTimeout: request.callTimeout ?? '10 minutes' } });
  const result = await generateText({
    model: provider.languageModel(modelId),
    system: request.system ?? 'You are a research assistant. Use the tools, then answer in one sentence.',
    prompt: question,
    tools,
    maxOutputTokens: 32,
    stopWhen: stepCountIs(steps),
    prepareStep: ({ stepNumber }) => ({
      toolChoice: stepNumber < steps - 1 ? { type: 'tool', toolName: stepNumber % 2 === 0 ? 'search' : 'read' } : 'none',
    }),
  });
  return result.steps.map(loopStepOf);
}

export const researchSteps = defineQuery<LoopStep[] | undefined>('researchSteps');
export const finish = defineSignal('finish');

/**
 * The same agent, kept open after its answer until `finish`: its KV (and the prefix it published, which
 * goes with it where prefixes have no idle time) stays while another run starts. `researchSteps` gives the
 * steps once answered.
 */
export async function researchThenWait(request: ResearchRequest): Promise<LoopStep[]> {
  let steps: LoopStep[] | undefined;
  let finished = false;
  setHandler(researchSteps, () => steps);
  setHandler(finish, () => {
    finished = true;
  });
  steps = await researchAgent(request);
  await condition(() => finished);
  return steps;
}

/** The same agent, which frees its KV itself once it has answered. */
export async function researchAndRelease(request: ResearchRequest): Promise<{ steps: LoopStep[]; released: boolean }> {
  const steps = await researchAgent(request);
  return { steps, released: await releaseModelMemory() };
}

/**
 * A long model call cancelled a second in: 'cancelled' at once when the workflow and @temporalio/ai-sdk
 * share one copy of @temporalio/workflow; with two, the call would run on to its end.
 */
export async function cancelledCall(modelId: string): Promise<'cancelled' | 'completed'> {
  const scope = new CancellationScope();
  const call = scope.run(() =>
    generateText({
      model: new TemporalProvider().languageModel(modelId),
      prompt: 'Write a very long story about a lighthouse keeper.',
      maxOutputTokens: 1000,
    }),
  );
  await sleep('1 second');
  scope.cancel();
  try {
    await call;
    return 'completed';
  } catch (err) {
    if (isCancellation(err)) return 'cancelled';
    throw err;
  }
}

export const followUp = defineSignal<[string]>('followUp');

/**
 * Answers a question, waits (idle: its KV leaves the engine for host memory, then disk) until a follow-up
 * question comes, and answers that in the same conversation.
 */
export async function idleAgent(modelId: string, question: string): Promise<LoopStep[]> {
  let next: string | undefined;
  setHandler(followUp, (text) => {
    next = text;
  });
  const model = new TemporalProvider().languageModel(modelId);
  const first = await generateText({ model, prompt: question, maxOutputTokens: 16 });
  await condition(() => next !== undefined);
  const second = await generateText({
    model,
    messages: [{ role: 'user', content: question }, ...first.response.messages, { role: 'user', content: next! }],
    maxOutputTokens: 16,
  });
  return [first, second].map(loopStepOf);
}

/**
 * Asks a question, then asks again with the history edited (another system prompt): the second call
 * departs from the stored conversation at the system message.
 */
export async function divergingAgent(modelId: string, question: string, systems: [string, string]): Promise<LoopStep[]> {
  const model = new TemporalProvider().languageModel(modelId);
  const calls = [];
  for (const system of systems) calls.push(await generateText({ model, system, prompt: question, maxOutputTokens: 16 }));
  return calls.map(loopStepOf);
}

/** A conversation's two calls around a pause, and what a wake-up's prefetch found (undefined: no wake-up). */
export interface PausedConversation {
  steps: LoopStep[];
  woke: ModelMemoryWake | undefined;
}

/**
 * Answers a question, pauses `pauseMs` (idle: its KV leaves the engine for host memory, then disk) and
 * asks a follow-up in the same conversation. With `wake`, the pause is a planned wake-up
 * (sleepThenWakeModelMemory): the KV is brought back before the follow-up.
 */
export async function pausedAgent(modelId: string, question: string, pauseMs: number, wake: boolean): Promise<PausedConversation> {
  const model = new TemporalProvider().languageModel(modelId);
  // No tenant sharing: runs compared with each other each prefill their own first prompt.
  const providerOptions = { kvfabric: { sharing: 'none' } };
  const first = await generateText({ model, prompt: question, maxOutputTokens: 16, providerOptions });
  const woke = wake ? await sleepThenWakeModelMemory(pauseMs) : await sleep(pauseMs);
  const second = await generateText({
    model,
    messages: [{ role: 'user', content: question }, ...first.response.messages, { role: 'user', content: 'Say it again in five words.' }],
    maxOutputTokens: 16,
    providerOptions,
  });
  return { steps: [first, second].map(loopStepOf), woke: woke ?? undefined };
}

/** Answers, then plans a wake-up it never uses: it waits for `followUp` and ends without another call. */
export async function unusedWake(modelId: string, question: string, pauseMs: number): Promise<ModelMemoryWake | undefined> {
  let done = false;
  setHandler(followUp, () => {
    done = true;
  });
  await generateText({ model: new TemporalProvider().languageModel(modelId), prompt: question, maxOutputTokens: 16 });
  const woke = await sleepThenWakeModelMemory(pauseMs);
  await condition(() => done);
  return woke;
}
