// How the newcomer test reads the README's quick start (./readme-quick-start.ts), and that README.md has
// what it needs: this fails in a second where the packed-package test would fail after minutes.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { asProgram, parseShellLine, quickStartOf, recommendedCompilerOptions, sourceFileOf } from './readme-quick-start';

const fence = (lang: string, body: string) => `\`\`\`${lang}\n${body}\n\`\`\``;

const SAMPLE = [
  '# kvfabric',
  '## Run it',
  fence('sh', 'npm ci && npm run demo'),
  '## Quick start in your project',
  'In the clone, then in your project:',
  fence(
    'sh',
    'cd kvfabric && npm pack   # prepack builds\nnpm install ../kvfabric/kvfabric-0.1.0.tgz node-llama-cpp@3.22.1\n\n# keys\nnpx kvfabric keygen --out keys',
  ),
  fence('ts', "import { KvFabricWorkerPlugin } from 'kvfabric/plugin';\nmain();"),
  fence('sh', 'KVFABRIC_KEY_FILE=keys/master.keys \\\n  node worker.js --tier-dir /shared/kv'),
  fence('ts', "import { AgentClient } from 'kvfabric/client';\nconst agents = await AgentClient.connect();"),
  fence('sh', 'KVFABRIC_CODEC_KEYS_FILE=keys/codec.keys node client.js'),
  '## Headline figures',
  fence('sh', 'node other.js'),
].join('\n');

describe('the quick start read out of a README', () => {
  it('finds the pack step, the set-up lines in order, the two program lines and the two snippets of its section alone', () => {
    const quick = quickStartOf(SAMPLE);
    expect(quick.pack).toBe('cd kvfabric && npm pack');
    expect(quick.setup.map((line) => line.argv)).toEqual([
      ['npm', 'install', '../kvfabric/kvfabric-0.1.0.tgz', 'node-llama-cpp@3.22.1'],
      ['npx', 'kvfabric', 'keygen', '--out', 'keys'],
    ]);
    expect(quick.runWorker).toMatchObject({
      env: { KVFABRIC_KEY_FILE: 'keys/master.keys' },
      argv: ['node', 'worker.js', '--tier-dir', '/shared/kv'],
    });
    expect(quick.runClient).toMatchObject({ env: { KVFABRIC_CODEC_KEYS_FILE: 'keys/codec.keys' }, argv: ['node', 'client.js'] });
    expect([sourceFileOf(quick.runWorker), sourceFileOf(quick.runClient)]).toEqual(['worker.ts', 'client.ts']);
    expect(quick.worker).toContain('KvFabricWorkerPlugin');
    expect(quick.client).toContain('AgentClient.connect');
  });

  it('names what is missing', () => {
    expect(() => quickStartOf(SAMPLE.replace('node worker.js', 'node server.js'))).toThrow(/one shell line `node worker.js ...`, found 0/);
    expect(() => quickStartOf(SAMPLE.replace('## Quick start in your project', '## Quick start'))).toThrow(
      /no section "## Quick start in your project"/,
    );
  });

  it('refuses a line that needs a shell, naming it', () => {
    for (const line of ['FOO="a b" node x.js', 'npm i x | tee log', 'node $(which x)', "npm pkg set 'a=b'"]) {
      expect(() => parseShellLine(line)).toThrow(`\`${line}\` needs a shell`);
    }
  });

  it('reads back any plain NAME=value prefix and words (property)', () => {
    const word = fc.stringMatching(/^[A-Za-z0-9@./:_=,+-]{1,12}$/).filter((w) => !/^[A-Za-z_][A-Za-z0-9_]*=/.test(w));
    const name = fc.stringMatching(/^[A-Z_][A-Z0-9_]{0,10}$/);
    fc.assert(
      fc.property(
        fc.dictionary(name, fc.stringMatching(/^[A-Za-z0-9./_-]{0,12}$/), { maxKeys: 4 }),
        fc.array(word, { minLength: 1, maxLength: 6 }),
        (env, argv) => {
          const text = [...Object.entries(env).map(([k, v]) => `${k}=${v}`), ...argv].join(' ');
          expect(parseShellLine(text)).toEqual({ text, env, argv });
        },
      ),
    );
  });

  it('makes a snippet written for an async function a program: imports first, the rest in main(), a failure exits 1', () => {
    const program = asProgram("import { a } from 'a';\nimport {\n  b,\n} from 'b';\n\nconst x = await a();\nconsole.log(x, b);");
    expect(program).toBe(
      [
        "import { a } from 'a';",
        'import {',
        '  b,',
        "} from 'b';",
        '',
        'async function main(): Promise<void> {',
        '',
        '  const x = await a();',
        '  console.log(x, b);',
        '}',
        'main().catch((err) => { console.error(err); process.exit(1); });',
        '',
      ].join('\n'),
    );
    expect(asProgram('async function main() {}\nmain();')).toBe('async function main() {}\nmain();');
  });
});

it('reads the compiler options of the one json block under "TypeScript settings"', () => {
  const doc = [
    '# plugins',
    fence('json', '{ "other": 1 }'),
    '## TypeScript settings',
    'Use:',
    fence('json', '{ "compilerOptions": { "strict": true, "module": "nodenext" } }'),
    '## Next',
    fence('json', '{}'),
  ].join('\n');
  expect(recommendedCompilerOptions(doc)).toEqual({ strict: true, module: 'nodenext' });
  expect(() => recommendedCompilerOptions(doc.replace('## TypeScript settings', '## Settings'))).toThrow(
    /no section "## TypeScript settings"/,
  );
});

it("README.md's quick start and docs/plugin.md's TypeScript settings have what the newcomer test runs", () => {
  expect(recommendedCompilerOptions(readFileSync(join(__dirname, '..', '..', 'docs', 'plugin.md'), 'utf8'))).toMatchObject({
    strict: true,
  });
  const quick = quickStartOf(readFileSync(join(__dirname, '..', '..', 'README.md'), 'utf8'));
  expect(quick.pack).toBeDefined();
  expect(quick.setup.some((line) => line.argv.join(' ').includes('kvfabric keygen'))).toBe(true);
  expect(quick.setup.some((line) => line.argv.some((word) => word.endsWith('.tgz')))).toBe(true);
});
