// The README's quick start as the newcomer test runs it, read out of README.md itself so that the two
// cannot drift: the section "Quick start in your project", its shell lines in order (```sh blocks) and its
// TypeScript snippets (```ts blocks: the worker is the one that adds KvFabricWorkerPlugin, the client the
// one that connects an AgentClient); and the compiler options docs/plugin.md recommends for them (the
// ```json block of its section "TypeScript settings").
//
// A shell line is `NAME=value ... command args`: plain words, no quoting, pipes or substitutions, so that
// the test runs it without a shell and a line a shell would read differently fails here, by name. One
// exception: a line that runs `npm pack` is the step taken in kvfabric's clone (`cd kvfabric && npm pack`
// reads naturally) and is recognised, not parsed.

export const QUICK_START_HEADING = '## Quick start in your project';
export const TYPESCRIPT_SETTINGS_HEADING = '## TypeScript settings';

export interface ShellLine {
  /** The line as the README has it (comments removed). */
  text: string;
  /** Its leading NAME=value assignments. */
  env: Record<string, string>;
  argv: string[];
}

export interface QuickStart {
  /** `npm pack`, in the clone; absent when the section has no such line. */
  pack: string | undefined;
  /** Every other shell line but the ones that run the user's programs, in the README's order. */
  setup: ShellLine[];
  /** `node worker.js ...`: the line that runs the worker snippet (compiled from worker.ts). */
  runWorker: ShellLine;
  /** `node <client>.js`: the line that runs the client snippet. */
  runClient: ShellLine;
  worker: string;
  client: string;
}

export function quickStartOf(markdown: string): QuickStart {
  const section = sectionOf(markdown, QUICK_START_HEADING);
  const blocks = fencedBlocks(section);
  const shell = blocks.filter((block) => ['sh', 'bash', 'shell'].includes(block.lang)).flatMap((block) => shellLines(block.body));
  const snippets = blocks.filter((block) => block.lang === 'ts' || block.lang === 'typescript').map((block) => block.body);
  const worker = only(
    snippets.filter((code) => code.includes('KvFabricWorkerPlugin')),
    'TypeScript snippet with KvFabricWorkerPlugin',
  );
  const client = only(
    snippets.filter((code) => code.includes('AgentClient.connect')),
    'TypeScript snippet with AgentClient.connect',
  );

  const pack = shell.find((line) => /\bnpm pack\b/.test(line));
  const parsed = shell.filter((line) => line !== pack).map(parseShellLine);
  const programs = parsed.filter((line) => line.argv[0] === 'node');
  const runWorker = only(
    programs.filter((line) => line.argv[1] === 'worker.js'),
    'shell line `node worker.js ...`',
  );
  const runClient = only(
    programs.filter((line) => line !== runWorker),
    'shell line that runs the client (`node client.js`)',
  );
  return { pack, setup: parsed.filter((line) => !programs.includes(line)), runWorker, runClient, worker, client };
}

/** The `compilerOptions` of the one ```json block in docs/plugin.md's "TypeScript settings". */
export function recommendedCompilerOptions(pluginDoc: string): Record<string, unknown> {
  const blocks = fencedBlocks(sectionOf(pluginDoc, TYPESCRIPT_SETTINGS_HEADING)).filter((block) => block.lang === 'json');
  const { compilerOptions } = JSON.parse(only(blocks, 'json block', 'docs/plugin.md "TypeScript settings"').body) as {
    compilerOptions?: Record<string, unknown>;
  };
  if (!compilerOptions) throw new Error('docs/plugin.md "TypeScript settings": its json block has no compilerOptions');
  return compilerOptions;
}

/** The snippet's file name: the worker runs as worker.js, so its source is worker.ts. */
export function sourceFileOf(run: ShellLine): string {
  const script = run.argv[1];
  if (!script?.endsWith('.js')) throw new Error(`README quick start: \`${run.text}\` does not run a .js file`);
  return `${script.slice(0, -'.js'.length)}.ts`;
}

/**
 * A snippet written to run "in an async function" (the client) as a module a user can run: its imports
 * first, the rest inside main(), and a failure printed and turned into exit code 1, as the worker snippet
 * does. A snippet that has its own main() is taken as it is.
 */
export function asProgram(snippet: string): string {
  if (/\bmain\(\)/.test(snippet)) return snippet;
  const lines = snippet.split('\n');
  const imports: string[] = [];
  let inImport = false;
  const body = lines.filter((line) => {
    if (inImport || /^import\s/.test(line)) {
      imports.push(line);
      inImport = !line.trimEnd().endsWith(';');
      return false;
    }
    return true;
  });
  return [
    ...imports,
    '',
    'async function main(): Promise<void> {',
    ...body.map((line) => (line ? `  ${line}` : line)),
    '}',
    'main().catch((err) => { console.error(err); process.exit(1); });',
    '',
  ].join('\n');
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

/** Comments dropped, backslash continuations joined, empty lines skipped. */
function shellLines(body: string): string[] {
  return body
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.replace(/(^|\s)#.*$/, '').trim())
    .filter((line) => line.length > 0);
}

export function parseShellLine(text: string): ShellLine {
  if (/['"`$|;&<>()*?\\]/.test(text))
    throw new Error(`README quick start: \`${text}\` needs a shell; the newcomer test runs plain \`NAME=value command args\` lines`);
  const words = text.split(/\s+/);
  const env: Record<string, string> = {};
  while (words.length > 0 && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0]!)) {
    const word = words.shift()!;
    const eq = word.indexOf('=');
    env[word.slice(0, eq)] = word.slice(eq + 1);
  }
  if (words.length === 0) throw new Error(`README quick start: \`${text}\` runs no command`);
  return { text, env, argv: words };
}

function only<T>(found: T[], what: string, where = 'README quick start'): T {
  if (found.length !== 1) throw new Error(`${where}: expected one ${what}, found ${found.length}`);
  return found[0]!;
}
