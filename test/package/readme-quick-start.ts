// The README's quick start as the newcomer test follows it, read out of README.md itself so that the two
// cannot drift: the section "Quick start in your project", in the order a reader meets it, as steps of two
// kinds. A shell line (```sh blocks, one line each, its comment included) is run by bash as printed; one
// whose comment says "in a terminal of its own" keeps running beside the next ones (the dev server, the
// worker). A ```ts block whose first line is a comment naming a file (`// worker.ts`) is written to that
// file as printed. The section links docs/plugin.md's TypeScript settings: that ```json block is the
// project's tsconfig.json, also as printed.

export const QUICK_START_HEADING = '## Quick start in your project';
export const TYPESCRIPT_SETTINGS_HEADING = '## TypeScript settings';
/** How the quick start points at the settings its snippets compile with. */
export const TYPESCRIPT_SETTINGS_LINK = 'docs/plugin.md#typescript-settings';

export type QuickStartStep = { kind: 'run'; line: string; background: boolean } | { kind: 'write'; file: string; body: string };

export interface QuickStart {
  steps: QuickStartStep[];
  /** The line that starts the worker snippet (`node worker.js ...`). */
  runWorker: ShellLine;
  /** The line that runs the client snippet (`node client.js`). */
  runClient: ShellLine;
}

/** A shell line read for what it sets: its leading NAME=value words and the command's words. */
export interface ShellLine {
  /** The line as the README prints it. */
  text: string;
  env: Record<string, string>;
  argv: string[];
}

export function quickStartOf(markdown: string): QuickStart {
  const section = sectionOf(markdown, QUICK_START_HEADING);
  if (!section.includes(TYPESCRIPT_SETTINGS_LINK))
    throw new Error(`README quick start: no link to ${TYPESCRIPT_SETTINGS_LINK}, the settings its snippets compile with`);
  const steps: QuickStartStep[] = [];
  for (const block of fencedBlocks(section)) {
    if (['sh', 'bash', 'shell'].includes(block.lang)) {
      for (const line of shellLines(block.body)) steps.push({ kind: 'run', line, background: /#.*\bterminal of its own\b/.test(line) });
    } else if (block.lang === 'ts' || block.lang === 'typescript') {
      const file = /^\/\/ ([\w./-]+\.ts)\b/.exec(block.body)?.[1];
      if (!file) throw new Error('README quick start: a ts snippet whose first line does not name its file (`// worker.ts`)');
      steps.push({ kind: 'write', file, body: block.body });
    }
  }
  const runs = steps.flatMap((step) => (step.kind === 'run' ? [parseShellLine(step.line)] : []));
  const programs = (script: string) => runs.filter((line) => line.argv[0] === 'node' && line.argv[1] === script);
  const runWorker = only(programs('worker.js'), 'shell line `node worker.js ...`');
  const runClient = only(programs('client.js'), 'shell line `node client.js`');
  for (const run of [runWorker, runClient]) {
    const source = `${run.argv[1]!.slice(0, -'.js'.length)}.ts`;
    if (!steps.some((step) => step.kind === 'write' && step.file === source))
      throw new Error(`README quick start: \`${run.text}\` runs ${run.argv[1]}, but no snippet is ${source}`);
  }
  return { steps, runWorker, runClient };
}

/** The ```json block of docs/plugin.md's "TypeScript settings", as printed: the project's tsconfig.json. */
export function recommendedTsconfig(pluginDoc: string): string {
  const blocks = fencedBlocks(sectionOf(pluginDoc, TYPESCRIPT_SETTINGS_HEADING)).filter((block) => block.lang === 'json');
  const body = only(blocks, 'json block', 'docs/plugin.md "TypeScript settings"').body;
  if (!(JSON.parse(body) as { compilerOptions?: unknown }).compilerOptions)
    throw new Error('docs/plugin.md "TypeScript settings": its json block has no compilerOptions');
  return body;
}

/** Leading NAME=value words and the command's words; the comment is not part of the command. */
export function parseShellLine(text: string): ShellLine {
  const words = text
    .replace(/(^|\s)#.*$/, '')
    .trim()
    .split(/\s+/)
    .filter(Boolean);
  const env: Record<string, string> = {};
  while (words.length > 0 && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0]!)) {
    const word = words.shift()!;
    const eq = word.indexOf('=');
    env[word.slice(0, eq)] = word.slice(eq + 1);
  }
  if (words.length === 0) throw new Error(`README quick start: \`${text}\` runs no command`);
  return { text, env, argv: words };
}

function sectionOf(markdown: string, heading: string): string {
  const lines = markdown.split('\n');
  const start = lines.findIndex((line) => line.trimEnd() === heading);
  if (start < 0) throw new Error(`no section "${heading}"`);
  // The next heading of the same or a higher level; a shell comment inside a fence is not one.
  let inFence = false;
  const end = lines.findIndex((line, i) => {
    if (i <= start) return false;
    if (line.startsWith('```')) inFence = !inFence;
    return !inFence && /^#{1,2} /.test(line);
  });
  return lines.slice(start + 1, end < 0 ? undefined : end).join('\n');
}

function fencedBlocks(section: string): Array<{ lang: string; body: string }> {
  const blocks: Array<{ lang: string; body: string }> = [];
  for (const match of section.matchAll(/^```(\w*)[^\n]*\n([\s\S]*?)^```\s*$/gm)) blocks.push({ lang: match[1]!, body: match[2]! });
  return blocks;
}

/** One line each (a backslash continuation stays part of its line, as bash reads it); blank and comment-only lines skipped. */
function shellLines(body: string): string[] {
  return body.split(/(?<!\\)\n/).filter((line) => line.trim().length > 0 && !line.trim().startsWith('#'));
}

function only<T>(found: T[], what: string, where = 'README quick start'): T {
  if (found.length !== 1) throw new Error(`${where}: expected one ${what}, found ${found.length}`);
  return found[0]!;
}
