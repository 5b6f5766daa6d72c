// The fast loop stays fast: no test of the `unit` project (test/projects.ts) starts a Temporal server,
// loads the real model, packs the package or drives a browser, directly or through the test helpers it
// imports. A new test that does is listed under its project there, or this fails naming what it reaches.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

import { describe, expect, it } from 'vitest';

import { TEST_PROJECTS } from '../projects';

const ROOT = resolve(__dirname, '..', '..');
/** This file and the project list name the needs without having them. */
const NAMING_NEEDS = new Set([__filename, join(ROOT, 'test', 'projects.ts')]);

/** What a test file (or a helper it imports) says when it needs more than the addon. */
const NEEDS_MORE: readonly [RegExp, string][] = [
  [/\bstartDevServer\(|\bstartCluster\(/, 'a Temporal dev server'],
  [/\bcreateTimeSkipping(Env)?\(|\bcreateLocal\(/, "Temporal's time-skipping test server"],
  [/\bLlamaEngine\b|\bgetLlama\(|model-memory-fixture|model-call-fixture|\bmodelFile\(/, 'the real model'],
  [/\bnpm['"]?,\s*\[?['"]pack\b|npm pack\b/, 'npm pack'],
  [/playwright|chromium/i, 'a browser'],
  [/\bstartSeaweedfs\(/, 'an S3 server'],
];

/** Relative imports of test helpers and scripts (src/ is the code under test: every project loads it). */
const RELATIVE_IMPORT = /(?:\bfrom\s*|^\s*import\s*|\brequire\(\s*|\bimport\(\s*)(['"])(\.[^'"]+)\1/gm;

function helperImports(file: string, text: string): string[] {
  return [...text.matchAll(RELATIVE_IMPORT)]
    .map((match) => resolve(dirname(file), match[2]!))
    .filter((target) => !relative(ROOT, target).startsWith('src'))
    .map((target) => (target.endsWith('.ts') ? target : `${target}.ts`));
}

/** The needs a file reaches through itself and the helpers it imports, each with the file that says it. */
function reachedNeeds(file: string, seen = new Set<string>()): string[] {
  if (seen.has(file) || NAMING_NEEDS.has(file)) return [];
  seen.add(file);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return []; // a folder's index or a .js helper: nothing of ours to follow
  }
  const own = NEEDS_MORE.filter(([pattern]) => pattern.test(text)).map(([, need]) => `${need} (${relative(ROOT, file)})`);
  return [...own, ...helperImports(file, text).flatMap((next) => reachedNeeds(next, seen))];
}

/** The glob forms test/projects.ts uses (`**` for any folders, `*` within a name) as a regular expression. */
function globPattern(glob: string): RegExp {
  const body = glob
    .split('**/')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replaceAll('*', '[^/]*'))
    .join('(?:.*/)?');
  return new RegExp(`^${body}$`);
}

const ALL_TEST_FILES = (readdirSync(join(ROOT, 'test'), { recursive: true }) as string[])
  .map((file) => `test/${file}`)
  .filter((file) => file.endsWith('.test.ts'))
  .sort();

function filesOf(name: string): string[] {
  const project = TEST_PROJECTS.find((candidate) => candidate.name === name)!;
  const matches = (globs: readonly string[], file: string) => globs.some((glob) => globPattern(glob).test(file));
  return ALL_TEST_FILES.filter((file) => matches(project.include, file) && !matches(project.exclude, file));
}

describe('test projects', () => {
  it('puts every test file in exactly one project', () => {
    const placed = TEST_PROJECTS.flatMap((project) => filesOf(project.name)).sort();
    expect(placed).toEqual(ALL_TEST_FILES);
  });

  it('keeps servers, the model, packing and browsers out of the unit project', () => {
    const offenders = filesOf('unit')
      .map((file) => ({ file, needs: reachedNeeds(join(ROOT, file)) }))
      .filter(({ needs }) => needs.length > 0);
    expect(offenders).toEqual([]);
  });
});
