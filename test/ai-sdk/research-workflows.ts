// Workflow code of the AI SDK tests: a research agent written with the AI SDK as a user writes one
// (generateText, two tools, several steps), its model calls running as @temporalio/ai-sdk's invokeModel
// activity. The tools run in the workflow (they are deterministic), the first steps are asked to call one
// (the test model is small: left to choose, it rarely does) and the last to answer.
import { temporalProvider } from '@temporalio/ai-sdk/workflow';
import { generateText, jsonSchema, stepCountIs, tool } from 'ai';

export interface LoopStep {
  text: string;
  toolCalls: Array<{ toolName: string; input: unknown }>;
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  reusedTokens: number | undefined;
  evaluatedTokens: number | undefined;
}

const LIBRARY: Record<string, string> = {
  kvfabric: 'kvfabric keeps the KV cache of AI agents across pauses, in GPU, host and disk tiers.',
  temporal: 'Temporal runs workflows durably: their history replays after a crash.',
  llama: 'llama.cpp runs language models on CPUs and GPUs.',
};

const tools = {
  search: tool({
    description: 'Searches the library for a topic; returns the id of the best entry.',
    inputSchema: jsonSchema<{ topic: string }>({
      type: 'object',
      properties: { topic: { type: 'string', enum: Object.keys(LIBRARY) } },
      required: ['topic'],
      additionalProperties: false,
    }),
    execute: async ({ topic }) => ({ id: Object.keys(LIBRARY).indexOf(topic) + 1 }),
  }),
  read: tool({
    description: 'Reads the library entry with this id.',
    inputSchema: jsonSchema<{ id: number }>({
      type: 'object',
      properties: { id: { type: 'integer', minimum: 1, maximum: 3 } },
      required: ['id'],
      additionalProperties: false,
    }),
    execute: async ({ id }) => ({ text: Object.values(LIBRARY)[id - 1] ?? 'no such entry' }),
  }),
};

/** Runs `steps` model calls: search and read in turn, then an answer. `system` lets a test change the prompt. */
export async function researchAgent(modelId: string, question: string, steps: number, system?: string): Promise<LoopStep[]> {
  const result = await generateText({
    model: temporalProvider.languageModel(modelId),
    system: system ?? 'You are a research assistant. Use the tools, then answer in one sentence.',
    prompt: question,
    tools,
    maxOutputTokens: 32,
    stopWhen: stepCountIs(steps),
    prepareStep: ({ stepNumber }) => ({
      toolChoice: stepNumber < steps - 1 ? { type: 'tool', toolName: stepNumber % 2 === 0 ? 'search' : 'read' } : 'none',
    }),
  });
  return result.steps.map((step) => ({
    text: step.text,
    toolCalls: step.toolCalls.map((call) => ({ toolName: call.toolName, input: call.input })),
    inputTokens: step.usage.inputTokens,
    outputTokens: step.usage.outputTokens,
    reusedTokens: step.usage.inputTokenDetails.cacheReadTokens,
    evaluatedTokens: step.usage.inputTokenDetails.noCacheTokens,
  }));
}
