// The engine layer's public surface: the seam, the fingerprint, and the llama.cpp engine behind it.
export type { ContextKv, Engine, GenerationSettings, StoredContext, EngineTurnRequest, EngineTurnResult } from './engine';
export { requireCompatible, type EngineFingerprint } from './fingerprint';
export { LlamaEngine } from './llama/llama-engine';
export { LLAMA_ENGINE_NAME, type LlamaEngineOptions } from './llama/open-llama';
export { NODE_LLAMA_CPP_VERSION } from './llama/node-llama-cpp';
export { DEFAULT_MODEL, ensureDefaultModel, modelFile } from './llama/default-model';
export { readModelInfo, type GgufModelInfo } from './llama/gguf-shape';
