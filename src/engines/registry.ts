// The engines a worker can run, by name (kvfabric-worker's --engine, the plugin's `engine` option). Adding
// one is its folder under src/engines/ and one line here; a program embedding the plugin may also register
// its own before the worker starts (registerEngine). The plugin opens the named engine and makes its pool
// as the engine's declared needs say: nothing above this knows one engine from another.
import { FabricError } from '../fabric/errors';
import type { OpenEngine } from './engine';
import { openLlamaEngine } from './llama/llama-engine';
import { openSyntheticEngine } from './synthetic/synthetic-engine';

const ENGINES = new Map<string, OpenEngine>([
  ['llama', openLlamaEngine],
  ['synthetic', openSyntheticEngine],
]);

/** Adds an engine under `name`; INVALID_ARGUMENT when the name is taken or malformed. */
export function registerEngine(name: string, open: OpenEngine): void {
  if (!/^[a-z][a-z0-9-]{0,63}$/.test(name))
    throw new FabricError('INVALID_ARGUMENT', `engine name '${name}': lowercase letters, digits, -`);
  if (ENGINES.has(name)) throw new FabricError('INVALID_ARGUMENT', `an engine named '${name}' is registered already`);
  ENGINES.set(name, open);
}

/** The opener of the engine named `name`; INVALID_ARGUMENT naming the registered ones otherwise. */
export function engineNamed(name: string): OpenEngine {
  const open = ENGINES.get(name);
  if (!open) throw new FabricError('INVALID_ARGUMENT', `--engine must be one of ${engineNames().join(', ')}, got '${name}'`);
  return open;
}

/** The registered engines' names. */
export function engineNames(): string[] {
  return [...ENGINES.keys()];
}
