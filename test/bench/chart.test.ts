// The resume chart's SVG writer (bench/chart.ts): well-formed XML, one line and one marker per point of
// each series, both log axes monotonic, and the results adapters' refusals of rows missing a field.
import { describe, expect, it } from 'vitest';

import { chartSvg, libraryRowsOf, resumeChart, temporalRowsOf, type LibraryResumeRow, type TemporalResumeRow } from '../../bench/chart';

const library: LibraryResumeRow[] = [
  { tokens: 512, prefillMs: 4100, resumeMs: 53 },
  { tokens: 2048, prefillMs: 19_400, resumeMs: 173 },
  { tokens: 8000, prefillMs: 128_000, resumeMs: 670 },
];
const temporal: TemporalResumeRow[] = [
  { tokens: 576, from: 'host', prefillMs: 4000, resumeMs: 31, firstTurnMs: 300 },
  { tokens: 621, from: 'disk', prefillMs: 4000, resumeMs: 62, firstTurnMs: 310 },
  { tokens: 2087, from: 'host', prefillMs: 15_000, resumeMs: 31, firstTurnMs: 500 },
  { tokens: 2132, from: 'disk', prefillMs: 15_000, resumeMs: 111, firstTurnMs: 550 },
  { tokens: 8129, from: 'host', prefillMs: 100_000, resumeMs: 32, firstTurnMs: 1460 },
  { tokens: 8174, from: 'disk', prefillMs: 100_000, resumeMs: 239, firstTurnMs: 1500 },
];

/** Throws unless every tag closes in order, attributes are quoted and text holds no bare `<` or `&`. */
function assertWellFormed(xml: string): void {
  const open: string[] = [];
  let roots = 0;
  const tag = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/y;
  let at = 0;
  while (at < xml.length) {
    const next = xml.indexOf('<', at);
    const text = xml.slice(at, next < 0 ? xml.length : next);
    if (/&(?!(amp|lt|gt|quot|apos);)/.test(text)) throw new Error(`bare & in text: ${text}`);
    if (open.length === 0 && text.trim() !== '') throw new Error(`text outside the root: ${text}`);
    if (next < 0) break;
    tag.lastIndex = next;
    const m = tag.exec(xml);
    if (!m) throw new Error(`malformed tag at ${next}: ${xml.slice(next, next + 80)}`);
    const [, closing, name, , selfClosing] = m;
    if (closing) {
      if (open.pop() !== name) throw new Error(`</${name}> closes nothing open`);
    } else if (!selfClosing) {
      if (open.length === 0) roots++;
      open.push(name!);
    } else if (open.length === 0) {
      roots++;
    }
    at = tag.lastIndex;
  }
  if (open.length > 0) throw new Error(`unclosed: ${open.join(', ')}`);
  if (roots !== 1) throw new Error(`${roots} root elements`);
}

interface DrawnPoint {
  series: number;
  tokens: number;
  ms: number;
  cx: number;
  cy: number;
}

function pointsOf(svg: string): DrawnPoint[] {
  const elements = svg.match(/<[^>]*class="point"[^>]*>/g) ?? [];
  return elements.map((element) => {
    const attribute = (name: string) => {
      const m = new RegExp(`\\s${name}="([^"]*)"`).exec(element);
      if (!m) throw new Error(`no ${name} on ${element}`);
      return Number(m[1]);
    };
    const centre = (axis: 'cx' | 'cy') => (element.startsWith('<circle') ? attribute(axis) : attribute(`data-${axis}`));
    return {
      series: attribute('data-series'),
      tokens: attribute('data-tokens'),
      ms: attribute('data-ms'),
      cx: centre('cx'),
      cy: centre('cy'),
    };
  });
}

describe('resume chart', () => {
  const svg = chartSvg(resumeChart(library, temporal, 'a machine & a date'));

  it('is one well-formed SVG document on a white background, subtitle escaped', () => {
    assertWellFormed(svg);
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg).toMatch(/<rect width="\d+" height="\d+" fill="#ffffff"\/>/);
    expect(svg).toContain('a machine &amp; a date');
    expect(svg).toContain('context length (tokens, log scale)');
  });

  it('draws three series: prefill and library at every size, Temporal from host only', () => {
    expect(svg.match(/<polyline /g)).toHaveLength(3);
    const points = pointsOf(svg);
    expect(points.filter((p) => p.series === 0).map((p) => p.tokens)).toEqual([512, 2048, 8000]);
    expect(points.filter((p) => p.series === 1).map((p) => p.tokens)).toEqual([512, 2048, 8000]);
    expect(points.filter((p) => p.series === 2).map((p) => [p.tokens, p.ms])).toEqual([
      [576, 331],
      [2087, 531],
      [8129, 1492],
    ]);
    expect(svg).toContain('re-prefill (llama.cpp)');
    expect(svg).toContain('resume in the library');
    expect(svg).toContain('resume through Temporal');
  });

  it('writes the ratio to re-prefill beside each resume point', () => {
    expect(svg).toContain('>77x<'); // 4100 / 53
    expect(svg).toContain('>191x<'); // 128000 / 670
    expect(svg).toContain('>67x<'); // 100000 / 1492
  });

  it('scales both axes monotonically: more tokens further right, more milliseconds higher', () => {
    const points = pointsOf(svg);
    for (const a of points) {
      for (const b of points) {
        if (a.tokens < b.tokens) expect(a.cx).toBeLessThan(b.cx);
        if (a.ms < b.ms) expect(a.cy).toBeGreaterThan(b.cy); // SVG's y grows downwards
      }
    }
    // Log scale: equal ratios are equal distances (512 -> 2048 and 2048 -> 8192 within the rounding).
    const prefill = points.filter((p) => p.series === 0);
    const perDoubling = (prefill[1]!.cx - prefill[0]!.cx) / 2;
    expect(prefill[2]!.cx - prefill[1]!.cx).toBeCloseTo(perDoubling * Math.log2(8000 / 2048), 0);
  });

  it('refuses points it cannot place on a log scale', () => {
    expect(() =>
      chartSvg({ title: 't', series: [{ name: 's', color: '#000', marker: 'circle', points: [{ tokens: 512, ms: 0 }] }] }),
    ).toThrow(/positive/);
    expect(() => chartSvg({ title: 't', series: [] })).toThrow(/at least one point/);
  });
});

describe('results adapters', () => {
  it('read the fields the chart needs and ignore the rest', () => {
    expect(libraryRowsOf({ threads: 1, rows: [{ tokens: 512, prefillMs: 10, resumeMs: 1, loadMs: 0.5 }] })).toEqual([
      { tokens: 512, prefillMs: 10, resumeMs: 1 },
    ]);
    expect(temporalRowsOf({ rows: [{ ...temporal[0], hotTurnMs: 5 }] })).toEqual([temporal[0]]);
  });

  it('name the row and the field that is missing', () => {
    expect(() => libraryRowsOf({ rows: [{ tokens: 512, prefillMs: 10 }] })).toThrow('engine-resume row 0: field resumeMs is missing');
    expect(() => temporalRowsOf({ rows: [{ tokens: 512, prefillMs: 10, resumeMs: 1, firstTurnMs: 2 }] })).toThrow(/from is missing/);
    expect(() => libraryRowsOf(undefined)).toThrow(/no rows/);
  });
});
