// The seam between kvfabric and whatever computes KV: an engine runs one turn of an agent's context and
// hands back the token ids it added; their KV follows when kvfabric asks (save), as rows in kvfabric's
// token-major layout ([token][layer][K=0,V=1][kvHead][headDim], src/fabric/types.ts BlockLayout), so a
// turn never waits for its KV to be copied out. kvfabric keeps the pages;
// the engine may keep a context "hot" in its own cache between turns, as a cache of those pages: it has
// the stored context written into its own state format (straight from the pages, natively) only when it
// does not hold exactly that context already.
import type { Backend, MemoryFile, PlaneMajorPiece } from '../fabric/types';
import type { EngineFingerprint } from './fingerprint';
import type { AgentModel } from './models';

/** Token ids and their KV: kv.length === tokens.length x bytesPerToken of the engine's shape. */
export interface ContextKv {
  tokens: Uint32Array;
  kv: Uint8Array;
}

/** An agent's context as kvfabric holds it before a turn. */
export interface StoredContext {
  /**
   * Every token id of the context (cheap: 4 bytes a token), so an engine can tell if its hot copy is this
   * one. The KV of the first `storedTokens` is in kvfabric's pages; the rest (a tail whose KV was not
   * saved yet, e.g. after its worker died) the engine evaluates again after loading the pages.
   */
  tokens: Uint32Array;
  /** How many of `tokens` have KV in the pages (default: all). */
  storedTokens?: number;
  /** The fingerprint recorded with the context; absent only for an empty context. */
  fingerprint?: EngineFingerprint;
  /**
   * Writes the KV of the first `storedTokens` tokens into `file`, laid out by `pieces` (the engine's own
   * state format: its headers, and each layer's K and V rows where the format wants them), straight from
   * the pages and each page checked against its checksum on the way (INTEGRITY otherwise); resolves with
   * the file's length. Called at most once, and only when the engine does not hold the context hot.
   */
  writeKv(file: MemoryFile, pieces: readonly PlaneMajorPiece[]): Promise<number>;
}

export interface GenerationSettings {
  /** Upper bound on reply tokens (default 128). */
  maxTokens?: number;
  /** 0 (default) is greedy decoding; above 0 samples with `seed` (default 0), so a turn still repeats exactly. */
  temperature?: number;
  seed?: number;
}

export interface EngineTurnRequest {
  /** Names the context in the engine's hot cache (e.g. the agent or fork id). */
  key: string;
  context: StoredContext;
  /** The user's message of this turn. */
  input: string;
  /** A system prompt, used only when the context is empty (the conversation's first turn). */
  system?: string;
  generation?: GenerationSettings;
}

export interface EngineTurnResult {
  reply: string;
  /** Tokens the turn fed to the model before generating (the formatted message). */
  promptTokens: number;
  /** Tokens generated for the reply, end-of-turn token excluded. */
  replyTokens: number;
  /**
   * The token ids the turn added (message, reply, closing tokens), in order. Their KV is in the engine's
   * hot copy only, until `save` hands it over: a turn does not wait for that.
   */
  added: Uint32Array;
  /** Whether the engine continued its hot copy, loaded the stored context, or started from empty. */
  resumedFrom: 'hot' | 'stored' | 'empty';
}

/** One message of a conversation an engine renders with its chat template. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  /**
   * The text, or the token ids it was generated as: a reply sent back as the ids the model produced
   * continues the KV computed for them, where its text tokenized again may split differently.
   */
  content: string | Uint32Array;
  /**
   * With ids as content: the text they were generated for, sent instead when the ids hold a special token
   * (a control or end-of-generation token, which no text tokenizes to). Without it such ids are
   * INVALID_ARGUMENT.
   */
  text?: string;
}

/** A reply held to JSON: `prefix` forced, then JSON that matches `schema` (a JSON Schema), then `suffix` forced. */
export interface StructuredReply {
  prefix: string;
  schema: object;
  suffix: string;
}

export interface EngineCompletionRequest {
  /** Names the context in the engine's hot cache. */
  key: string;
  /**
   * What kvfabric holds of `key`, cut by the caller to the longest prefix it shares with `prompt`, and
   * shorter than `prompt` (the call evaluates at least one token). The engine reuses its hot copy instead
   * when that shares at least as long a prefix with the prompt.
   */
  context: StoredContext;
  /** The whole prompt (renderConversation): the reused prefix, then what this call evaluates. */
  prompt: Uint32Array;
  generation?: GenerationSettings;
  /** Its schema is held to JSON_SCHEMA_LIMITS (json-schema-bounds.ts) before it is compiled: INVALID_ARGUMENT otherwise. */
  structured?: StructuredReply;
  /** Told each piece of the reply's text as it is generated (forced pieces included): what streaming shows. */
  onText?: (delta: string) => void;
  /** Once aborted, the reply stops at the next token and is closed as it is (finish 'length'): a cancelled call. */
  signal?: AbortSignal;
}

export interface EngineCompletionResult {
  /** The reply's text (structured: prefix, JSON and suffix). */
  text: string;
  /** The reply's token ids, forced ones included, closing tokens excluded: what ChatMessage.content takes back. */
  reply: Uint32Array;
  /** Prompt tokens whose KV was reused (hot, or loaded from the pages). */
  reusedTokens: number;
  /** Prompt tokens the model evaluated. */
  evaluatedTokens: number;
  /** 'length' when the reply stopped at maxTokens. */
  finish: 'stop' | 'length';
  /** The context after the call: prompt, reply, closing tokens. Their KV is hot in the engine until saved. */
  tokens: Uint32Array;
  resumedFrom: EngineTurnResult['resumedFrom'];
}

/** What a worker must provide around an engine: the plugin reads it (src/plugin/worker-memory.ts). */
export interface EngineNeeds {
  /**
   * The engine's own cache is the hot tier and it cannot read kvfabric's pages: the pages live in host
   * memory (a CPU pool, whatever the worker's backend), so no context is held twice on the device, and a
   * resume from host memory loads the engine straight from there.
   */
  hostPool: boolean;
}

/** What a worker opens its engine with (its flags: src/worker/config.ts). */
export interface EngineSettings {
  /** The pool's model when the worker names one; an engine without a model file of its own takes its shape. */
  model?: AgentModel;
  /** A model file, for engines that load one. */
  modelFile?: string;
  /** Tokens one context may hold. */
  contextLength: number;
  /** Tokens evaluated in one pass, for engines that batch. */
  batchSize?: number;
  /** The pool's backend: a CUDA worker runs its model on the GPU too. */
  backend: Backend;
}

/** Opens an engine of one kind: what the engine registry (registry.ts) holds under its name. */
export type OpenEngine = (settings: EngineSettings) => Promise<Engine>;

export interface Engine {
  /** Recorded beside every context this engine extends; checked before a stored context is loaded. */
  readonly fingerprint: EngineFingerprint;
  readonly needs: EngineNeeds;
  /** The file its model was loaded from, for the worker's log (not in the fingerprint: another path may hold the same model). */
  readonly modelFile?: string;
  /**
   * Runs one turn. Errors are FabricErrors: INCOMPATIBLE (context of another engine setting),
   * OUT_OF_RANGE (the turn would pass the context length; nothing changes), INTEGRITY (stored bytes that
   * cannot be a context), INVALID_ARGUMENT, BUSY (a call on `key` is running). Checks run before anything
   * changes; an error after the turn started leaves the engine with no hot copy of `key`. An engine may
   * answer before it has evaluated what closes the reply (its end tokens): the next call, save or release
   * of `key` waits for that, and is not refused for it.
   */
  turn(request: EngineTurnRequest): Promise<EngineTurnResult>;
  /**
   * A conversation in the model's chat template, ending where the assistant's reply begins. OUT_OF_RANGE
   * when it is longer than the context length: judged from its size before any of it is tokenized where
   * that already tells, else as soon as its tokens pass it.
   */
  renderConversation(messages: readonly ChatMessage[]): Uint32Array;
  /**
   * Continues the longest prefix of `prompt` the engine or the pages hold, evaluates the rest and
   * generates a reply: what a caller that sends the whole conversation every time (the AI SDK) needs.
   * An agent's first turn may run as complete() of renderConversation([{ role: 'user', content }]) (prefix
   * sharing): for one message the two give the same reply and token ids.
   * Same errors as turn(); INVALID_ARGUMENT when `context` is not a prefix of `prompt` shorter than it.
   */
  complete(request: EngineCompletionRequest): Promise<EngineCompletionResult>;
  /**
   * Makes `context` the hot copy of `key` (pages loaded, the tail evaluated), unless it is already: what a
   * resume does so that the next turn pays only its own model time. Same errors as turn().
   */
  load(key: string, context: StoredContext): Promise<EngineTurnResult['resumedFrom']>;
  /**
   * The KV of the hot copy of `key` from token `fromToken` on, as token ids and token-major rows: what
   * kvfabric appends to the pages after a turn, off the turn's path. INVALID_STATE when `key` is not hot
   * (evicted meanwhile: its pages and token ids still rebuild it), BUSY while a call on `key` runs.
   */
  save(key: string, fromToken: number): Promise<ContextKv>;
  /** Lets go of the hot copy of `key`, if any; the next turn on it loads the stored context. */
  release(key: string): Promise<void>;
  /**
   * Stand-in KV for a turn given as a token count (benchmarks, tests of the bookkeeping), deterministic in
   * its arguments: only engines that take such turns have it; a turn of tokens elsewhere is INVALID_ARGUMENT.
   */
  standInKv?(key: string, turn: number, tokens: number, bytesPerToken: number): Uint8Array;
  close(): Promise<void>;
}
