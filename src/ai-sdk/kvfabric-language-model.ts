// The worker's model as an AI SDK language model (specification v4), for @temporalio/ai-sdk's invokeModel
// and invokeModelStreaming activities: each call continues the calling workflow run's KV
// (model-call-memory.ts) and reports, in its usage, the prompt tokens it reused (cacheRead) and those it
// evaluated (noCache). kvfabric's errors leave as ApplicationFailures typed by their code, those a retry
// cannot fix non-retryable, as kvfabric's own activities do.
import { createHash } from 'node:crypto';

import { Context } from '@temporalio/activity';

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

import { withFailureCodes } from '../activities/failures';
import type { GenerationSettings, StructuredReply } from '../engines/engine';
import { checkJsonSchemaBounds } from '../engines/json-schema-bounds';
import { currentModelCallOwner } from './model-call-owner';
import type { ModelCallResult, ModelCalls } from './model-call-memory';
import { modelCallSharingOf } from './model-call-sharing';
import { assistantText, chatMessagesOf, replyContent, replyFormatOf } from './prompt-messages';

/** Reply tokens when the call sets no maxOutputTokens. */
const DEFAULT_MAX_OUTPUT_TOKENS = 256;
/** How often a running call heartbeats (the SDK throttles what reaches the server). */
const HEARTBEAT_MS = 1000;

export class KvFabricLanguageModel implements LanguageModelV4 {
  readonly specificationVersion = 'v4';
  readonly provider = 'kvfabric';
  readonly supportedUrls: Record<string, RegExp[]> = {};

  constructor(
    readonly modelId: string,
    /** What runs the calls (the worker's model-call memory); throws while the worker is not running. */
    private readonly memory: () => ModelCalls,
  ) {}

  doGenerate(options: LanguageModelV4CallOptions): Promise<LanguageModelV4GenerateResult> {
    return withFailureCodes(() => this.generate(options));
  }

  /**
   * The reply as a stream. Text streams as the model generates it; a reply that may be a tool call comes
   * whole once the model has finished (its text is the call, not words for the user). A failure errors
   * the stream, typed as doGenerate's are.
   */
  async doStream(options: LanguageModelV4CallOptions): Promise<LanguageModelV4StreamResult> {
    const textId = 'text-0';
    let streamed = false;
    let controller!: ReadableStreamDefaultController<LanguageModelV4StreamPart>;
    const stream = new ReadableStream<LanguageModelV4StreamPart>({
      start(c) {
        controller = c;
      },
    });
    const warnings: SharedV4Warning[] = [];
    const onText = (delta: string) => {
      if (!streamed) {
        controller.enqueue({ type: 'stream-start', warnings });
        controller.enqueue({ type: 'text-start', id: textId });
        streamed = true;
      }
      controller.enqueue({ type: 'text-delta', id: textId, delta });
    };
    withFailureCodes(() => this.generate(options, warnings, onText)).then(
      (result) => {
        if (streamed) {
          const metadata = result.content[0]?.type === 'text' ? result.content[0].providerMetadata : undefined;
          controller.enqueue({ type: 'text-end', id: textId, ...(metadata ? { providerMetadata: metadata } : {}) });
        } else {
          controller.enqueue({ type: 'stream-start', warnings: result.warnings });
          result.content.forEach((item, index) => {
            if (item.type === 'text') {
              const id = `text-${index}`;
              controller.enqueue({ type: 'text-start', id });
              controller.enqueue({ type: 'text-delta', id, delta: item.text });
              controller.enqueue({ type: 'text-end', id, ...(item.providerMetadata ? { providerMetadata: item.providerMetadata } : {}) });
            } else if (item.type === 'tool-call') {
              controller.enqueue(item);
            }
          });
        }
        if (result.response) controller.enqueue({ type: 'response-metadata', ...result.response });
        controller.enqueue({
          type: 'finish',
          finishReason: result.finishReason,
          usage: result.usage,
          ...(result.providerMetadata ? { providerMetadata: result.providerMetadata } : {}),
        });
        controller.close();
      },
      // The stream fails with the typed failure itself: @temporalio/ai-sdk's activity rethrows what a read
      // throws, where it would make an `error` part a retryable failure of its own.
      (err: unknown) => controller.error(err),
    );
    return { stream };
  }

  /** One call; `onText` streams the reply's text when it cannot be a tool call. */
  private async generate(
    options: LanguageModelV4CallOptions,
    warnings: SharedV4Warning[] = [],
    onText?: (delta: string) => void,
  ): Promise<LanguageModelV4GenerateResult> {
    const owner = currentModelCallOwner();
    const memory = this.memory();
    const { carriedReplies } = memory;
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
    const callable = format.mayCall ? format.tools : [];
    const sharing = modelCallSharingOf(options.providerOptions);
    // Heartbeats are how a running activity learns it was cancelled: the reply then stops at once.
    const activity = Context.current();
    const heartbeats = setInterval(() => activity.heartbeat(), HEARTBEAT_MS);
    let result: ModelCallResult;
    try {
      result = await memory.complete(owner, {
        messages: (replyIds) =>
          chatMessagesOf(options.prompt, format, replyIds, warnings, (parts, text) => carriedReplies.carriedReplyIds(owner, parts, text)),
        generation,
        ...(structured ? { structured } : {}),
        replyText: (text) => assistantText(asPromptParts(replyContent(text, callable, () => ''))),
        ...(onText && !format.mayCall ? { onText } : {}),
        signal: activity.cancellationSignal,
        sharing,
      });
    } finally {
      clearInterval(heartbeats);
    }
    activity.cancellationSignal.throwIfAborted();
    // Named after the call's place in its run, so a retried call names its tool calls the same.
    const ids = (index: number) =>
      `kvf_${createHash('sha256').update(`${result.contextId}:${result.tokens.length}:${index}`).digest('hex').slice(0, 24)}`;
    const replied = replyContent(result.text, callable, ids);
    const content = carriedReplies.withReplyIds(owner, replied, assistantText(asPromptParts(replied)), result.reply);
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
        kvfabric: {
          reusedTokens: result.reusedTokens,
          evaluatedTokens: result.evaluatedTokens,
          sharedTokens: result.sharedTokens ?? 0,
          resumedFrom: result.resumedFrom,
        },
      },
      response: { modelId: this.modelId, timestamp: new Date() },
      warnings,
    };
  }
}

/** A JSON response format with a schema holds the reply to it (no tool call asked for); INVALID_ARGUMENT past JSON_SCHEMA_LIMITS. */
function jsonReply(options: LanguageModelV4CallOptions, warnings: SharedV4Warning[]): StructuredReply | undefined {
  const format = options.responseFormat;
  if (format?.type !== 'json') return undefined;
  if (!format.schema) {
    warnings.push({ type: 'unsupported', feature: 'a JSON response format without a schema' });
    return undefined;
  }
  checkJsonSchemaBounds(format.schema, "the response format's JSON Schema");
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
