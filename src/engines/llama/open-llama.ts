// Opening the llama engine: its options, node-llama-cpp loaded (prebuilt binaries only), the model file
// checked and loaded, one llama context made with the pinned settings (flash attention as asked, K and V
// f16, every setting llama.cpp gave checked against what was asked), and the fingerprint recorded beside
// every context the engine extends.
import fs from 'node:fs';
import os from 'node:os';

import type { Llama, LlamaContext, LlamaModel, Token } from 'node-llama-cpp';

import { FabricError } from '../../fabric/errors';
import type { EngineFingerprint } from '../fingerprint';
import { chatMlTurnFormat, type ChatTurnFormat } from './chat-turn';
import { modelFile as defaultModelFile, sha256File } from './default-model';
import { modelInfoFromMetadata } from './gguf-shape';
import { loadNodeLlamaCpp, noPrebuiltBinary, NODE_LLAMA_CPP_VERSION } from './node-llama-cpp';
import { defaultStateDir, streamCount } from './state-files';

export const LLAMA_ENGINE_NAME = 'llama.cpp';

const DEFAULT_CONTEXT_LENGTH = 4096;

export interface LlamaEngineOptions {
  /** A GGUF file; default $KVFABRIC_MODEL_FILE, else the cached default model (scripts/ensure-model.ts). */
  modelFile?: string;
  /**
   * Tokens one context may hold, exactly: a turn that would pass it is refused OUT_OF_RANGE (default 4096,
   * or the model's trained length when that is shorter). llama.cpp pads its own cache to a multiple of 256
   * cells; kvfabric holds contexts to this length, not to the padded one. More than the model was trained
   * for is refused.
   */
  contextLength?: number;
  /** Default true. */
  flashAttention?: boolean;
  /** Contexts kept hot at once (llama sequences; default 2). */
  hotContexts?: number;
  /** Default false (CPU). 'cuda' is unverified here. */
  gpu?: false | 'cuda';
  /** Where saved states pass through (a turn's KV on its way out); default /dev/shm (tmpfs) when writable, else the OS temp directory. */
  stateDir?: string;
  /**
   * CPU threads (default: all cores but one). llama.cpp's threads spin at every barrier, so a machine busy
   * with other work slows down by orders of magnitude when they take every core (docs/engines.md); one
   * core stays free for Node and the allocator's copies.
   */
  threads?: number;
  /**
   * Tokens llama.cpp evaluates in one pass (default: node-llama-cpp's, 512). Under 64 (llama.cpp's
   * attention tile), every pass of more than one token takes the same attention kernel, so a token's KV
   * does not depend on how the tokens were split into passes: on one thread, a context continued from
   * kvfabric's pages then replies bit for bit as the same context evaluated whole does. Prefill is slower
   * (docs/ai-sdk.md#identical-replies).
   */
  batchSize?: number;
}

/** What an opened llama engine is made of. */
export interface OpenedLlama {
  llama: Llama;
  model: LlamaModel;
  context: LlamaContext;
  format: ChatTurnFormat;
  vocabularySize: number;
  /** UTF-8 bytes of the vocabulary's longest token: text of n bytes is at least n / this many tokens. */
  longestTokenBytes: number;
  stateDir: string;
  /** The llama context's KV streams (one per sequence unless its cache is unified): rebuilt states need it. */
  streams: number;
  fingerprint: EngineFingerprint;
  modelFile: string;
}

/** Loads the model and makes its llama context; everything loaded is let go again if a later step fails. */
export async function openLlama(options: LlamaEngineOptions): Promise<OpenedLlama> {
  const batchSize = options.batchSize === undefined ? undefined : batchSizeOf(options.batchSize);
  const file = options.modelFile ?? defaultModelFile();
  if (!fs.existsSync(file)) {
    throw new FabricError(
      'UNAVAILABLE',
      `model file ${file} not found: run \`npx kvfabric model\` ` +
        "(in kvfabric's repository: `npm run setup:model`) " +
        'or set KVFABRIC_MODEL_FILE',
    );
  }
  const flashAttention = options.flashAttention ?? true;
  const nlc = await loadNodeLlamaCpp();
  const [llama, modelSha256] = await Promise.all([
    nlc
      .getLlama({ gpu: options.gpu ?? false, build: 'never', logLevel: nlc.LlamaLogLevel.error, progressLogs: false })
      .catch((err: unknown) => {
        throw err instanceof nlc.NoBinaryFoundError ? noPrebuiltBinary(options.gpu ?? false) : err;
      }),
    sha256File(file),
  ]);
  const model = await llama.loadModel({ modelPath: file }).catch((err: unknown) => {
    // llama.cpp's own words ("Failed to load model") name no file: a truncated download reads the same.
    throw new FabricError(
      'UNAVAILABLE',
      `cannot load model file ${file}: ${err instanceof Error ? err.message : String(err)} ` +
        '(a truncated or damaged GGUF? download it again: `npx kvfabric model`, or point KVFABRIC_MODEL_FILE at a whole one)',
    );
  });
  try {
    const info = modelInfoFromMetadata(model.fileInfo.metadata);
    const contextLength = contextLengthFor(options.contextLength, info.trainedContextLength);
    const context = await model.createContext({
      contextSize: contextLength,
      sequences: options.hotContexts ?? 2,
      ...(batchSize === undefined ? {} : { batchSize }),
      flashAttention,
      experimentalKvCacheKeyType: 'F16',
      experimentalKvCacheValueType: 'F16',
      // Sliding-window models would otherwise drop old cells from saved states: tokens and cells must match.
      swaFullCache: true,
      threads: options.threads ?? Math.max(1, os.availableParallelism() - 1),
    });
    if (context.contextSize < contextLength) {
      await context.dispose();
      throw new FabricError('UNAVAILABLE', `a context of ${contextLength} tokens was asked for, llama.cpp gave ${context.contextSize}`);
    }
    if (context.flashAttention !== flashAttention) {
      await context.dispose();
      throw new FabricError(
        'UNAVAILABLE',
        `flash attention ${flashAttention ? 'on' : 'off'} was asked for, llama.cpp gave ${context.flashAttention ? 'on' : 'off'}`,
      );
    }
    const metadata = model.fileInfo.metadata as unknown as Record<string, { vocab_size?: number } | undefined>;
    const vocabularySize = metadata[info.architecture]?.vocab_size ?? model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0;
    const stateDir = options.stateDir ?? defaultStateDir();
    return {
      llama,
      model,
      context,
      format: chatMlTurnFormat(model, vocabularySize),
      vocabularySize,
      longestTokenBytes: longestTokenBytes(model, vocabularySize),
      stateDir,
      streams: await streamCount(context, stateDir),
      fingerprint: {
        engine: LLAMA_ENGINE_NAME,
        version: `node-llama-cpp ${NODE_LLAMA_CPP_VERSION} (llama.cpp ${llama.llamaCppRelease.release}, ${llama.gpu || 'cpu'})`,
        modelSha256,
        flashAttention,
        kType: 'f16',
        vType: 'f16',
        shape: info.shape,
        // What turns are held to (see contextLength): llama.cpp's padded size would let a longer one through.
        contextLength,
      },
      modelFile: file,
    };
  } catch (err) {
    await model.dispose();
    throw err;
  }
}

/** UTF-8 bytes of the longest text any token stands for (at least 1). */
function longestTokenBytes(model: LlamaModel, vocabularySize: number): number {
  let longest = 1;
  for (let token = 0; token < vocabularySize; token++) {
    longest = Math.max(longest, Buffer.byteLength(model.detokenize([token as Token], true)));
  }
  return longest;
}

/** The batch size asked for, checked before anything loads. */
function batchSizeOf(asked: number): number {
  if (!Number.isSafeInteger(asked) || asked < 1)
    throw new FabricError('INVALID_ARGUMENT', `batchSize must be a whole number of tokens >= 1, got ${asked}`);
  return asked;
}

/** The length asked for, checked against the model; the default fits the model. */
function contextLengthFor(asked: number | undefined, trained: number): number {
  const limit = trained > 0 ? trained : Infinity;
  if (asked === undefined) return Math.min(DEFAULT_CONTEXT_LENGTH, limit);
  // The worker's flag and the plugin's option, named: this is where a wrong one is first noticed.
  const setting = 'context length (--context-length, contextLength)';
  if (!Number.isSafeInteger(asked) || asked < 1)
    throw new FabricError('INVALID_ARGUMENT', `${setting} must be a whole number of tokens >= 1, got ${asked}`);
  if (asked > limit)
    throw new FabricError(
      'INVALID_ARGUMENT',
      `${setting} ${asked} is more than the model was trained for (${trained} tokens): ask for at most ${trained}`,
    );
  return asked;
}
