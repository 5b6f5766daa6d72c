// Loading node-llama-cpp from CommonJS. It is an ES module with top-level await, which require() cannot
// load (ERR_REQUIRE_ASYNC_MODULE, even on Node 20.19+), and tsc's CommonJS output turns `import()` into
// require(). Under tsx and vitest the `import()` below is a real dynamic import and simply works; in the
// tsc build it fails that way, and the import goes through a Function body instead, which tsc leaves
// alone (vitest's module runner, in turn, cannot run an import from a Function: hence both).
type NodeLlamaCpp = typeof import('node-llama-cpp');

const importFromFunction = new Function('specifier', 'return import(specifier)') as (specifier: string) => Promise<NodeLlamaCpp>;

let loaded: Promise<NodeLlamaCpp> | undefined;

export function loadNodeLlamaCpp(): Promise<NodeLlamaCpp> {
  loaded ??= import('node-llama-cpp').catch((err: unknown) => {
    const code = (err as { code?: unknown } | null)?.code;
    if (code !== 'ERR_REQUIRE_ASYNC_MODULE' && code !== 'ERR_REQUIRE_ESM') throw err;
    return importFromFunction('node-llama-cpp');
  });
  return loaded;
}
