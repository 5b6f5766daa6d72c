// The worker's model as an AI SDK language model (specification v4), for @temporalio/ai-sdk's invokeModel
// activity: each call continues the calling workflow run's KV (model-call-memory.ts) and reports, in its
// usage, the prompt tokens it reused (cacheRead) and those it evaluated (noCache).
import { createHash } from 'node:crypto';

import type {
  LanguageModelV4,
  LanguageModelV4CallOptions,
  LanguageModelV4Content,
  LanguageModelV4FinishReason,
  LanguageModelV4GenerateResult,
  LanguageModelV4StreamPart,
  LanguageModelV4StreamResult,
  SharedV4Warning,
} from '@ai-sdk/provider';

import type { GenerationSettings, StructuredReply } from '../engines/engine';
import { currentModelCallOwner } from './model-call-owner';
import type { ModelCalls } from './model-call-memory';
import { assistantText, chatMessagesOf, replyContent, replyFormatOf } from './prompt-messages';

/** Reply tokens when the call sets no maxOutputTokens. */
const DEFAULT_MAX_OUTPUT_TOKENS = 256;

export class KvFabricLanguageModel implements LanguageModelV4 {
  readonly specificationVersion = 'v4';
  readonly provider = 'kvfabric';
  readonly supportedUrls: Record<string, RegExp[]> = {};

  constructor(
    readonly modelId: string,
    /** What runs the calls (the worker's model-call memory); throws while the worker is not running. */
    private readonly memory: () => ModelCalls,
  ) {}

  async doGenerate(options: LanguageModelV4CallOptions): Promise<LanguageModelV4GenerateResult> {
    const owner = currentModelCallOwner();
    const memory = this.memory();
    const warnings: SharedV4Warning[] = [];
    const format = replyFormatOf(options, warnings);
    const structured = format.structured ?? jsonReply(options, warnings);
    for (const setting of ['topP', 'topK', 'presencePenalty', 'frequencyPenalty', 'stopSequences'] as const) {
      if (options[setting] !== undefined) warnings.push({ type: 'unsupported', feature: setting });
    }
    const generation: GenerationSettings = {
      maxTokens: options.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS,
      temperature: options.temperature ?? 0,
      ...(options.seed !== undefined ? { seed: options.seed } : {}),
    };
    const result = await memory.complete(owner, {
      messages: (replyIds) => chatMessagesOf(options.prompt, format, replyIds, warnings),
      generation,
      ...(structured ? { structured } : {}),
      replyText: (text) => assistantText(asPromptParts(replyContent(text, format.mayCall ? format.tools : [], () => ''))),
    });
    // Named after the call's place in its run, so a retried call names its tool calls the same.
    const ids = (index: number) =>
      `kvf_${createHash('sha256').update(`${result.contextId}:${result.tokens.length}:${index}`).digest('hex').slice(0, 24)}`;
    const content = replyContent(result.text, format.mayCall ? format.tools : [], ids);
    return {
      content,
      finishReason: finishReasonOf(content, result.finish),
      usage: {
        inputTokens: {
          total: result.reusedTokens + result.evaluatedTokens,
          noCache: result.evaluatedTokens,
          cacheRead: result.reusedTokens,
          cacheWrite: result.evaluatedTokens,
        },
        outputTokens: { total: result.reply.length, text: result.reply.length, reasoning: undefined },
      },
      providerMetadata: {
        kvfabric: { reusedTokens: result.reusedTokens, evaluatedTokens: result.evaluatedTokens, resumedFrom: result.resumedFrom },
      },
      response: { modelId: this.modelId, timestamp: new Date() },
      warnings,
    };
  }

  /**
   * The reply as a stream, once it is whole: the parts come after the model has finished, not token by
   * token (docs/ai-sdk.md, "Streaming").
   */
  async doStream(options: LanguageModelV4CallOptions): Promise<LanguageModelV4StreamResult> {
    const result = await this.doGenerate(options);
    const parts: LanguageModelV4StreamPart[] = [{ type: 'stream-start', warnings: result.warnings }];
    if (result.response) parts.push({ type: 'response-metadata', ...result.response });
    result.content.forEach((item, index) => {
      if (item.type === 'text') {
        const id = `text-${index}`;
        parts.push({ type: 'text-start', id }, { type: 'text-delta', id, delta: item.text }, { type: 'text-end', id });
      } else if (item.type === 'tool-call') {
        parts.push(item);
      }
    });
    parts.push({
      type: 'finish',
      finishReason: result.finishReason,
      usage: result.usage,
      ...(result.providerMetadata ? { providerMetadata: result.providerMetadata } : {}),
    });
    const stream = new ReadableStream<LanguageModelV4StreamPart>({
      start(controller) {
        for (const part of parts) controller.enqueue(part);
        controller.close();
      },
    });
    return { stream, ...(result.response ? { response: result.response } : {}) };
  }
}

/** A JSON response format with a schema holds the reply to it (no tool call asked for). */
function jsonReply(options: LanguageModelV4CallOptions, warnings: SharedV4Warning[]): StructuredReply | undefined {
  const format = options.responseFormat;
  if (format?.type !== 'json') return undefined;
  if (!format.schema) {
    warnings.push({ type: 'unsupported', feature: 'a JSON response format without a schema' });
    return undefined;
  }
  return { prefix: '', schema: format.schema, suffix: '' };
}

/** Content as the next call's prompt carries it back: a tool call's input parsed. */
function asPromptParts(content: LanguageModelV4Content[]): Parameters<typeof assistantText>[0] {
  const parts: Parameters<typeof assistantText>[0][number][] = [];
  for (const item of content) {
    if (item.type === 'text') parts.push({ type: 'text', text: item.text });
    else if (item.type === 'tool-call')
      parts.push({ type: 'tool-call', toolCallId: item.toolCallId, toolName: item.toolName, input: JSON.parse(item.input) });
  }
  return parts;
}

function finishReasonOf(content: LanguageModelV4Content[], finish: 'stop' | 'length'): LanguageModelV4FinishReason {
  if (content.some((item) => item.type === 'tool-call')) return { unified: 'tool-calls', raw: 'tool-calls' };
  return { unified: finish, raw: finish };
}
