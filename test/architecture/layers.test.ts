// The folders of src/ form layers, and an import may only reach down (or stay in its own folder):
// a lower layer that imports a higher one is how a house turns into a maze. Read from the sources
// themselves (import ... from, import '...', require('...') and import('...') with a literal path, in .ts
// and .js files alike), so a new import that runs back up fails here.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = join(__dirname, '..', '..', 'src');

/** Lowest first. Folders on one rank do not import each other. */
const LAYERS: readonly (readonly string[])[] = [
  ['fabric'],
  ['identity', 'operations', 'blob-store'],
  ['tiers'],
  ['security', 'shared-directory', 'engines'],
  ['prefix-sharing'],
  ['agent-memory'],
  ['activities'],
  ['workflows', 'ai-sdk'],
  ['client', 'dev-server'],
  ['plugin'],
  ['worker', 'cli'],
  ['demo'],
];

function rankOf(folder: string): number {
  const rank = LAYERS.findIndex((layer) => layer.includes(folder));
  if (rank < 0) throw new Error(`src/${folder} has no layer: add it to LAYERS`);
  return rank;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return /\.(ts|js)$/.test(name) ? [path] : [];
  });
}

/** A relative module path as a static import, an import for its effects, require() or import() names it. */
const RELATIVE_IMPORT = /(?:\bfrom\s*|^\s*import\s*|\brequire\(\s*|\bimport\(\s*)(['"])(\.[^'"]+)\1/gm;

function folderOf(path: string): string {
  return relative(SRC, path).split(sep)[0]!;
}

describe('src/ layers', () => {
  const edges: { from: string; to: string; file: string }[] = [];
  for (const file of sourceFiles(SRC)) {
    const from = folderOf(file);
    for (const [, , spec] of readFileSync(file, 'utf8').matchAll(RELATIVE_IMPORT)) {
      const to = folderOf(join(file, '..', spec!));
      if (to !== from) edges.push({ from, to, file: relative(SRC, file) });
    }
  }

  it('reads every form of a relative import, and nothing else', () => {
    const text = [
      "import { a } from '../fabric/a';",
      "import '../tiers/effects';",
      "const b = require('../security/b');",
      'const c = await import("../workflows/c");',
      "import { d } from '@temporalio/common';",
      'const e = require(name);',
    ].join('\n');
    expect([...text.matchAll(RELATIVE_IMPORT)].map((match) => match[2])).toEqual([
      '../fabric/a',
      '../tiers/effects',
      '../security/b',
      '../workflows/c',
    ]);
  });

  it('finds the imports it judges', () => {
    expect(edges.length).toBeGreaterThan(20);
  });

  it('imports reach only lower layers', () => {
    const upward = edges.filter(({ from, to }) => rankOf(from) <= rankOf(to)).map(({ from, to, file }) => `${file}: ${from} -> ${to}`);
    expect(upward).toEqual([]);
  });
});
