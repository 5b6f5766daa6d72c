// Loading node-llama-cpp, the one place that does. It is an optional peer dependency of the package
// (docs/engines.md, "Install"): a client or a synthetic-engine worker never loads it, and a project that
// lacks it learns which package to install, and how, from the first llama turn's worker instead of a
// bare module-not-found error.
//
// From CommonJS: it is an ES module with top-level await, which require() cannot load
// (ERR_REQUIRE_ASYNC_MODULE, even on Node 20.19+), and tsc's CommonJS output turns `import()` into
// require(). Under tsx and vitest the `import()` below is a real dynamic import and simply works; in the
// tsc build it fails that way, and the import goes through a Function body instead, which tsc leaves
// alone (vitest's module runner, in turn, cannot run an import from a Function: hence both).
import { FabricError } from '../../fabric/errors';

type NodeLlamaCpp = typeof import('node-llama-cpp');

/** The peer dependency's pinned version (package.json); the engine reports it in every fingerprint. */
export const NODE_LLAMA_CPP_VERSION = '3.22.1';

/** The command that installs the CPU build alone is longer: docs/engines.md has it. */
const NODE_LLAMA_CPP_MISSING =
  `the llama engine needs node-llama-cpp ${NODE_LLAMA_CPP_VERSION}, which is not installed: ` +
  `npm install node-llama-cpp@${NODE_LLAMA_CPP_VERSION} (its CPU build alone: docs/engines.md, "Install"), ` +
  'or run the worker with --engine synthetic (KVFABRIC_ENGINE)';

/**
 * node-llama-cpp present without a prebuilt llama.cpp binary for this machine (its NoBinaryFoundError,
 * whose message is only its name): the engine never builds one (`build: 'never'`), so the fix is a package.
 */
export function noPrebuiltBinary(gpu: false | 'cuda'): FabricError {
  const fix =
    process.platform === 'linux'
      ? `npm install @node-llama-cpp/linux-${process.arch}${gpu === 'cuda' ? '-cuda' : ''}@${NODE_LLAMA_CPP_VERSION}`
      : `install node-llama-cpp's prebuilt package for ${process.platform}-${process.arch} at ${NODE_LLAMA_CPP_VERSION}`;
  return new FabricError(
    'UNAVAILABLE',
    `node-llama-cpp ${NODE_LLAMA_CPP_VERSION} found no prebuilt llama.cpp binary for this machine (${gpu === false ? 'CPU' : gpu}): ` +
      `${fix} (docs/engines.md, "Install")`,
  );
}

const importFromFunction = new Function('specifier', 'return import(specifier)') as (specifier: string) => Promise<NodeLlamaCpp>;

let loaded: Promise<NodeLlamaCpp> | undefined;

export function loadNodeLlamaCpp(): Promise<NodeLlamaCpp> {
  loaded ??= import('node-llama-cpp')
    .catch((err: unknown) => {
      const code = (err as { code?: unknown } | null)?.code;
      if (code !== 'ERR_REQUIRE_ASYNC_MODULE' && code !== 'ERR_REQUIRE_ESM') throw err;
      return importFromFunction('node-llama-cpp');
    })
    .catch((err: unknown) => {
      throw isPackageMissing(err) ? new FabricError('UNAVAILABLE', NODE_LLAMA_CPP_MISSING) : err;
    });
  return loaded;
}

/**
 * The package itself is absent, not one of its own dependencies: those name node-llama-cpp only in the
 * path they were imported from, never as the quoted specifier.
 */
function isPackageMissing(err: unknown): boolean {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return false;
  return typeof message === 'string' && /^Cannot find (package|module) 'node-llama-cpp'/.test(message);
}
