// Every relative link in README.md and docs/*.md reaches a file of the repository, and every #anchor a
// heading of its target (GitHub's heading slugs), so a newcomer who follows one lands where it says. Links
// to the web are not fetched; links inside code are not links.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

import { describe, expect, it } from 'vitest';

const ROOT = join(__dirname, '..', '..');
const DOCS = [
  join(ROOT, 'README.md'),
  ...readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => join(ROOT, 'docs', name)),
];

/** The text outside fenced code blocks. */
function withoutFences(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
}

/** The text outside fenced code blocks and inline code spans: where a link is a link. */
function prose(markdown: string): string {
  return withoutFences(markdown).replace(/`[^`\n]*`/g, '');
}

/** Inline link targets `[text](target)`; the text may span lines. */
function linkTargets(markdown: string): string[] {
  return [...prose(markdown).matchAll(/\]\(\s*<?([^()\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((match) => match[1]!);
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens; repeats get -1, -2, ... */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, heading] of withoutFences(markdown).matchAll(/^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$/gm)) {
    const text = heading!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/<[^>]+>/g, '')
      .replace(/`/g, '');
    const slug = text
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

/** What is wrong with one link of `file`; undefined when it resolves. */
function brokenLink(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // https:, mailto: ...
  const hash = target.indexOf('#');
  const path = hash === -1 ? target : target.slice(0, hash);
  const anchor = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const destination = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
  if (!destination.startsWith(ROOT)) return `${target}: leaves the repository`;
  if (!existsSync(destination)) return `${target}: no such file`;
  if (anchor === undefined) return undefined;
  if (statSync(destination).isDirectory() || !destination.endsWith('.md')) return `${target}: an anchor into a file that is not markdown`;
  return headingAnchors(readFileSync(destination, 'utf8')).has(anchor) ? undefined : `${target}: no heading with anchor #${anchor}`;
}

describe('markdown links', () => {
  it('finds the links it judges', () => {
    const count = DOCS.reduce((sum, file) => sum + linkTargets(readFileSync(file, 'utf8')).length, 0);
    expect(count).toBeGreaterThan(50);
  });

  it('reads anchors the way GitHub makes them', () => {
    const anchors = headingAnchors(
      '# Run it\n## Placement, failover, idempotency\n### `kvfabric` CLI\n## Limits\n## Limits\n```\n# not a heading\n```\n',
    );
    expect([...anchors]).toEqual(['run-it', 'placement-failover-idempotency', 'kvfabric-cli', 'limits', 'limits-1']);
  });

  it.each(DOCS.map((file) => [relative(ROOT, file), file]))('%s: every relative link and anchor resolves', (_name, file) => {
    const broken = linkTargets(readFileSync(file, 'utf8'))
      .map((target) => brokenLink(file, target))
      .filter((problem): problem is string => problem !== undefined);
    expect(broken).toEqual([]);
  });
});
