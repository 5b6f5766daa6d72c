// A research agent written with the Vercel AI SDK, made durable by Temporal through @temporalio/ai-sdk,
// its model's KV kept between steps by kvfabric. The one line that differs from any AI SDK workflow on
// Temporal is the model id: 'kvfabric' (docs/ai-sdk.md). This is workflow code: the tools run here
// because they are deterministic; a tool that does I/O calls an activity.
import { temporalProvider } from '@temporalio/ai-sdk/workflow'; // not the package root: it holds worker code
import { generateText, jsonSchema, stepCountIs, tool } from 'ai';

const LIBRARY: Record<string, string> = {
  kvfabric: 'kvfabric keeps the KV cache of AI agents across pauses, in GPU, host and disk tiers.',
  temporal: 'Temporal runs workflows durably: their history replays after a crash.',
  llama: 'llama.cpp runs language models on CPUs and GPUs.',
};

export const researchTools = {
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

/** One step of the loop, as the example prints it. */
export interface ResearchStep {
  toolCalls: string[];
  text: string;
  /** Prompt tokens whose KV kvfabric continued, and those the model evaluated. */
  reusedTokens: number | undefined;
  evaluatedTokens: number | undefined;
}

export async function researchAgent(question: string): Promise<ResearchStep[]> {
  const result = await generateText({
    model: temporalProvider.languageModel('kvfabric'),
    system: 'You are a research assistant. Use the tools, then answer in one sentence.',
    prompt: question,
    tools: researchTools,
    maxOutputTokens: 32,
    stopWhen: stepCountIs(4),
    // The example's model (SmolLM2-135M) rarely calls a tool on its own, or stops: search, read, search,
    // then asked for the answer (appended, so the conversation so far stays a prefix kvfabric continues).
    // A larger model needs no prepareStep.
    prepareStep: ({ stepNumber, messages }) =>
      stepNumber < 3
        ? { toolChoice: { type: 'tool', toolName: stepNumber % 2 === 0 ? 'search' : 'read' } }
        : { toolChoice: 'none', messages: [...messages, { role: 'user', content: 'Now answer my question in one sentence.' }] },
  });
  return result.steps.map((step) => ({
    toolCalls: step.toolCalls.map((call) => `${call.toolName}(${JSON.stringify(call.input)})`),
    text: step.text,
    reusedTokens: step.usage.inputTokenDetails.cacheReadTokens,
    evaluatedTokens: step.usage.inputTokenDetails.noCacheTokens,
  }));
}
