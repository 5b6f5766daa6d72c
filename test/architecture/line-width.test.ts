// No line of src/ runs past the formatter's width (biome.json lineWidth): Biome wraps code but not the
// strings and comments it cannot split, so this holds those to the same width.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

import { expect, it } from 'vitest';

const ROOT = join(__dirname, '..', '..');
const WIDTH: number = JSON.parse(readFileSync(join(ROOT, 'biome.json'), 'utf8')).formatter.lineWidth;

it(`keeps every line of src/ within ${WIDTH} columns, strings and comments included`, () => {
  const sources = (readdirSync(join(ROOT, 'src'), { recursive: true }) as string[]).filter((file) => /\.(ts|js)$/.test(file));
  const long = sources.flatMap((file) =>
    readFileSync(join(ROOT, 'src', file), 'utf8')
      .split('\n')
      .flatMap((line, i) => (line.length > WIDTH ? [`${relative(ROOT, join(ROOT, 'src', file))}:${i + 1} (${line.length})`] : [])),
  );
  expect(long).toEqual([]);
});
