// The seam between kvfabric and whatever computes KV: an engine runs one turn of an agent's context and
// hands back only what the turn added, as token ids and KV rows in kvfabric's token-major layout
// ([token][layer][K=0,V=1][kvHead][headDim], src/fabric/types.ts BlockLayout). kvfabric keeps the pages;
// the engine may keep a context "hot" in its own cache between turns, as a cache of those pages: it reads
// the stored context (through a loader) only when it does not hold exactly that context already.
import type { EngineFingerprint } from './fingerprint';

/** Token ids and their KV: kv.length === tokens.length x bytesPerToken of the engine's shape. */
export interface ContextKv {
  tokens: Uint32Array;
  kv: Uint8Array;
}

/** An agent's context as kvfabric holds it before a turn. */
export interface StoredContext {
  /** All token ids of the context (cheap: 4 bytes a token), so an engine can tell if its hot copy is this one. */
  tokens: Uint32Array;
  /** The fingerprint recorded with the context; absent only for an empty context. */
  fingerprint?: EngineFingerprint;
  /** The KV rows of every token, token-major; called at most once, and only when the engine needs them. */
  loadKv(): Promise<Uint8Array>;
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
  /** Only what the turn added to the context: every token whose KV is now in the engine's cache, and that KV. */
  appended: ContextKv;
  /** Whether the engine continued its hot copy, loaded the stored context, or started from empty. */
  resumedFrom: 'hot' | 'stored' | 'empty';
}

export interface Engine {
  /** Recorded beside every context this engine extends; checked before a stored context is loaded. */
  readonly fingerprint: EngineFingerprint;
  /**
   * Runs one turn. Errors are FabricErrors: INCOMPATIBLE (context of another engine setting),
   * OUT_OF_RANGE (the turn would pass the context length; nothing changes), INTEGRITY (stored bytes that
   * cannot be a context), INVALID_ARGUMENT, BUSY (a turn of `key` is running). Checks run before anything
   * changes; an error after the turn started leaves the engine with no hot copy of `key`.
   */
  turn(request: EngineTurnRequest): Promise<EngineTurnResult>;
  /** Lets go of the hot copy of `key`, if any; the next turn on it loads the stored context. */
  release(key: string): Promise<void>;
  close(): Promise<void>;
}
