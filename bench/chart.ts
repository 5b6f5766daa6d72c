// The chart of resume against re-prefill by context length, as a standalone SVG (no dependency, no
// external service): bench:all draws it from the JSON it collected, and
//   npm run bench:chart -- build/bench/results.json [--out docs/resume-vs-prefill.svg]
// redraws it from an earlier run's results without running anything.
// Both axes are logarithmic (context length doubles, times span five decades); the background is white so
// the chart reads the same on GitHub's light and dark themes.
import fs from 'node:fs';
import path from 'node:path';

export interface ChartPoint {
  /** Context length in tokens. */
  tokens: number;
  ms: number;
  /** Written beside the point (the ratio to re-prefill). */
  note?: string;
}

export interface ChartSeries {
  name: string;
  color: string;
  /** SVG stroke-dasharray; solid when absent. */
  dash?: string;
  marker: 'circle' | 'square' | 'diamond';
  points: ChartPoint[];
}

export interface Chart {
  title: string;
  /** A second, smaller line under the title: the machine and the date. */
  subtitle?: string;
  series: ChartSeries[];
  /** Under the legend: how to read the points' notes. */
  note?: string;
}

const WIDTH = 820;
const HEIGHT = 480;
const PLOT = { left: 84, right: 560, top: 78, bottom: 404 };
const INK = '#1f2328';
const GRID = '#d0d7de';
const FONT = 'font-family="-apple-system, Segoe UI, Helvetica, Arial, sans-serif"';

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

const fixed = (value: number) => Number(value.toFixed(1));

/** 512, 1k, 2k, 8k: context lengths as the docs write them. */
export function formatTokens(tokens: number): string {
  return tokens >= 1024 && tokens % 1024 === 0 ? `${tokens / 1024}k` : String(tokens);
}

/** 1 ms, 10 ms, 100 ms, 1 s, 10 s: the y axis's decades. */
export function formatMs(ms: number): string {
  if (ms >= 1000) return `${Number((ms / 1000).toPrecision(3))} s`;
  return `${Number(ms.toPrecision(3))} ms`;
}

/** Maps a value onto [from, to] on a log scale spanning [min, max]. */
function logScale(min: number, max: number, from: number, to: number): (value: number) => number {
  const low = Math.log(min);
  const span = Math.log(max) - low;
  return (value) => from + ((Math.log(value) - low) / span) * (to - from);
}

function marker(kind: ChartSeries['marker'], x: number, y: number, color: string, attributes: string): string {
  if (kind === 'circle') return `<circle ${attributes} cx="${fixed(x)}" cy="${fixed(y)}" r="4.5" fill="${color}"/>`;
  if (kind === 'square')
    return `<rect ${attributes} x="${fixed(x - 4)}" y="${fixed(y - 4)}" width="8" height="8" fill="${color}" data-cx="${fixed(x)}" data-cy="${fixed(y)}"/>`;
  return `<path ${attributes} d="M${fixed(x)} ${fixed(y - 5.5)}L${fixed(x + 5.5)} ${fixed(y)}L${fixed(x)} ${fixed(y + 5.5)}L${fixed(x - 5.5)} ${fixed(y)}Z" fill="${color}" data-cx="${fixed(x)}" data-cy="${fixed(y)}"/>`;
}

/**
 * The chart as an SVG document. Every point is an element with class "point", data-series (the series'
 * index) and its centre in cx/cy or data-cx/data-cy; each series' line is a polyline with the same
 * data-series. A series with no points keeps its legend entry and draws nothing.
 */
export function chartSvg(chart: Chart): string {
  const points = chart.series.flatMap((s) => s.points);
  if (points.length === 0) throw new Error('a chart needs at least one point');
  for (const p of points) {
    if (!(p.tokens > 0) || !(p.ms > 0)) throw new Error(`a point needs positive tokens and ms (got ${p.tokens}, ${p.ms})`);
  }
  const yMin = 10 ** Math.floor(Math.log10(Math.min(...points.map((p) => p.ms))));
  const yMax = 10 ** Math.ceil(Math.log10(Math.max(...points.map((p) => p.ms))));
  const yTop = yMax > yMin ? yMax : yMin * 10;
  const xLow = Math.min(...points.map((p) => p.tokens));
  const xHigh = Math.max(...points.map((p) => p.tokens));
  // A quarter of a doubling either side, so the end points do not sit on the frame.
  const xMin = xLow / 1.25;
  const xMax = Math.max(xHigh, xLow * 2) * 1.25;
  const x = logScale(xMin, xMax, PLOT.left, PLOT.right);
  const y = logScale(yMin, yTop, PLOT.bottom, PLOT.top);

  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" role="img" aria-label="${escapeXml(chart.title)}">`,
  );
  out.push(`<title>${escapeXml(chart.title)}</title>`);
  out.push(`<rect width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`);
  out.push(`<text x="${PLOT.left}" y="30" ${FONT} font-size="17" font-weight="600" fill="${INK}">${escapeXml(chart.title)}</text>`);
  if (chart.subtitle) out.push(`<text x="${PLOT.left}" y="52" ${FONT} font-size="12" fill="#57606a">${escapeXml(chart.subtitle)}</text>`);

  // Decades of milliseconds, with light lines at 2x and 5x.
  for (let decade = yMin; decade <= yTop * 1.0001; decade *= 10) {
    const at = y(decade);
    out.push(`<line x1="${PLOT.left}" y1="${fixed(at)}" x2="${PLOT.right}" y2="${fixed(at)}" stroke="${GRID}" stroke-width="1"/>`);
    out.push(
      `<text x="${PLOT.left - 8}" y="${fixed(at + 4)}" ${FONT} font-size="12" text-anchor="end" fill="${INK}">${formatMs(decade)}</text>`,
    );
    for (const minor of [2, 5]) {
      if (decade * minor >= yTop) continue;
      const m = y(decade * minor);
      out.push(
        `<line x1="${PLOT.left}" y1="${fixed(m)}" x2="${PLOT.right}" y2="${fixed(m)}" stroke="${GRID}" stroke-width="0.5" stroke-dasharray="2 3"/>`,
      );
    }
  }
  // Powers of two of tokens.
  for (let tick = 2 ** Math.ceil(Math.log2(xMin)); tick <= xMax; tick *= 2) {
    const at = x(tick);
    out.push(`<line x1="${fixed(at)}" y1="${PLOT.top}" x2="${fixed(at)}" y2="${PLOT.bottom}" stroke="${GRID}" stroke-width="0.5"/>`);
    out.push(
      `<text x="${fixed(at)}" y="${PLOT.bottom + 18}" ${FONT} font-size="12" text-anchor="middle" fill="${INK}">${formatTokens(tick)}</text>`,
    );
  }
  out.push(
    `<rect x="${PLOT.left}" y="${PLOT.top}" width="${PLOT.right - PLOT.left}" height="${PLOT.bottom - PLOT.top}" fill="none" stroke="${INK}" stroke-width="1"/>`,
  );
  out.push(
    `<text x="${(PLOT.left + PLOT.right) / 2}" y="${PLOT.bottom + 42}" ${FONT} font-size="13" text-anchor="middle" fill="${INK}">context length (tokens, log scale)</text>`,
  );
  const yLabelX = 22;
  const yLabelY = (PLOT.top + PLOT.bottom) / 2;
  out.push(
    `<text x="${yLabelX}" y="${yLabelY}" transform="rotate(-90 ${yLabelX} ${yLabelY})" ${FONT} font-size="13" text-anchor="middle" fill="${INK}">time to a ready context (ms, log scale)</text>`,
  );

  chart.series.forEach((series, index) => {
    const sorted = [...series.points].sort((a, b) => a.tokens - b.tokens);
    const tag = `data-series="${index}"`;
    if (sorted.length > 1) {
      const line = sorted.map((p) => `${fixed(x(p.tokens))},${fixed(y(p.ms))}`).join(' ');
      out.push(
        `<polyline ${tag} points="${line}" fill="none" stroke="${series.color}" stroke-width="2"${series.dash ? ` stroke-dasharray="${series.dash}"` : ''}/>`,
      );
    }
    for (const p of sorted) {
      const px = x(p.tokens);
      const py = y(p.ms);
      out.push(marker(series.marker, px, py, series.color, `class="point" ${tag} data-tokens="${p.tokens}" data-ms="${fixed(p.ms)}"`));
      // Below and right of the point: the lines rise to the right, so that corner stays clear.
      if (p.note)
        out.push(
          `<text x="${fixed(px + 8)}" y="${fixed(py + 17)}" ${FONT} font-size="11" font-weight="600" fill="${series.color}">${escapeXml(p.note)}</text>`,
        );
    }
  });

  // The legend, right of the plot: wide enough for a long series name on two lines.
  const legendX = PLOT.right + 20;
  chart.series.forEach((series, index) => {
    const top = PLOT.top + 10 + index * 60;
    out.push(
      `<line x1="${legendX}" y1="${top}" x2="${legendX + 26}" y2="${top}" stroke="${series.color}" stroke-width="2"${series.dash ? ` stroke-dasharray="${series.dash}"` : ''}/>`,
    );
    out.push(marker(series.marker, legendX + 13, top, series.color, 'class="legend-marker"'));
    const [first, ...rest] = wrap(series.name, 30);
    out.push(`<text x="${legendX + 34}" y="${top + 4}" ${FONT} font-size="12" fill="${INK}">${escapeXml(first ?? '')}</text>`);
    rest.forEach((line, i) =>
      out.push(`<text x="${legendX + 34}" y="${top + 19 + i * 15}" ${FONT} font-size="12" fill="${INK}">${escapeXml(line)}</text>`),
    );
  });
  if (chart.note) {
    wrap(chart.note, 34).forEach((line, i) =>
      out.push(
        `<text x="${legendX}" y="${PLOT.top + 10 + chart.series.length * 60 + i * 15}" ${FONT} font-size="11" fill="#57606a">${escapeXml(line)}</text>`,
      ),
    );
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** Splits text at spaces into lines of at most `width` characters (a longer word stays whole). */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  for (const word of text.split(' ')) {
    const last = lines.at(-1);
    if (last !== undefined && last.length + 1 + word.length <= width) lines[lines.length - 1] = `${last} ${word}`;
    else lines.push(word);
  }
  return lines;
}

/** The library's row of engine-resume: pages to a ready llama sequence, against prefilling the same tokens. */
export interface LibraryResumeRow {
  tokens: number;
  prefillMs: number;
  resumeMs: number;
}

/** agent-resume's row: a resume update plus the first turn after it, against the prefill turn, through Temporal. */
export interface TemporalResumeRow {
  tokens: number;
  from: string;
  prefillMs: number;
  resumeMs: number;
  firstTurnMs: number;
}

const ratio = (prefillMs: number, resumeMs: number) => `${Math.round(prefillMs / resumeMs).toLocaleString('en-US')}x`;

/**
 * The chart of resume against re-prefill: the library's prefill is the re-prefill line (the model's own
 * cost, nothing of kvfabric's in it), and each resume point carries its ratio to the prefill measured
 * with it (through Temporal: its own prefill turn, from host).
 */
export function resumeChart(library: LibraryResumeRow[], temporal: TemporalResumeRow[], subtitle?: string): Chart {
  const fromHost = temporal.filter((r) => r.from === 'host');
  return {
    title: 'Resume against re-prefill, SmolLM2-135M on the CPU',
    ...(subtitle ? { subtitle } : {}),
    note: 'Beside each resume: re-prefill time / resume time, both from the same run.',
    series: [
      {
        name: 're-prefill (llama.cpp)',
        color: '#cf222e',
        dash: '6 4',
        marker: 'square',
        points: library.map((r) => ({ tokens: r.tokens, ms: r.prefillMs, note: formatMs(r.prefillMs) })),
      },
      {
        name: 'resume in the library (pages to a ready sequence, from host)',
        color: '#0969da',
        marker: 'circle',
        points: library.map((r) => ({ tokens: r.tokens, ms: r.resumeMs, note: ratio(r.prefillMs, r.resumeMs) })),
      },
      {
        name: 'resume through Temporal (resume update + first turn, from host)',
        color: '#1a7f37',
        marker: 'diamond',
        points: fromHost.map((r) => ({
          tokens: r.tokens,
          ms: r.resumeMs + r.firstTurnMs,
          note: ratio(r.prefillMs, r.resumeMs + r.firstTurnMs),
        })),
      },
    ],
  };
}

function numberField(row: Record<string, unknown>, field: string, where: string): number {
  const value = row[field];
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new Error(`${where}: field ${field} is missing or not a number`);
  return value;
}

function rowsOf(json: unknown, name: string): Array<Record<string, unknown>> {
  const rows = (json as { rows?: unknown } | null | undefined)?.rows;
  if (!Array.isArray(rows)) throw new Error(`${name}'s results have no rows`);
  return rows as Array<Record<string, unknown>>;
}

/** engine-resume's rows as the chart reads them: `tokens`, `prefillMs`, `resumeMs`; other fields are ignored. */
export function libraryRowsOf(engineJson: unknown): LibraryResumeRow[] {
  return rowsOf(engineJson, 'engine-resume').map((row, i) => ({
    tokens: numberField(row, 'tokens', `engine-resume row ${i}`),
    prefillMs: numberField(row, 'prefillMs', `engine-resume row ${i}`),
    resumeMs: numberField(row, 'resumeMs', `engine-resume row ${i}`),
  }));
}

/** agent-resume's rows as the chart reads them. */
export function temporalRowsOf(agentJson: unknown): TemporalResumeRow[] {
  return rowsOf(agentJson, 'agent-resume').map((row, i) => {
    const where = `agent-resume row ${i}`;
    if (typeof row.from !== 'string') throw new Error(`${where}: field from is missing`);
    return {
      tokens: numberField(row, 'tokens', where),
      from: row.from,
      prefillMs: numberField(row, 'prefillMs', where),
      resumeMs: numberField(row, 'resumeMs', where),
      firstTurnMs: numberField(row, 'firstTurnMs', where),
    };
  });
}

/** Where bench:all and bench:chart write the chart. */
export const RESUME_CHART_FILE = path.join('docs', 'resume-vs-prefill.svg');

/** Writes the chart of a bench:all results.json's engineResume and agentResume to `file`. */
export function writeResumeChart(
  results: { engineResume: unknown; agentResume: unknown },
  subtitle: string,
  file = RESUME_CHART_FILE,
): void {
  const chart = resumeChart(libraryRowsOf(results.engineResume), temporalRowsOf(results.agentResume), subtitle);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, chartSvg(chart));
}

/** "AMD EPYC x2 cores, Node v20.20.2, 2026-11-30": the subtitle, from a results.json's machine and date. */
export function subtitleOf(results: { date?: unknown; machine?: unknown }): string {
  const m = (results.machine ?? {}) as { cpu?: string; cores?: number; node?: string; gpu?: string };
  const date = typeof results.date === 'string' ? results.date.slice(0, 10) : '';
  return [`${m.cpu ?? 'unknown CPU'} x${m.cores ?? '?'} cores`, m.node ? `Node ${m.node}` : '', 'npm run bench:all', date]
    .filter(Boolean)
    .join(', ');
}

if (require.main === module) {
  const args = process.argv.slice(2);
  const input = args.find((a, i) => !a.startsWith('--') && args[i - 1] !== '--out') ?? path.join('build', 'bench', 'results.json');
  const outAt = args.indexOf('--out');
  const out = outAt >= 0 && args[outAt + 1] ? args[outAt + 1]! : RESUME_CHART_FILE;
  const results = JSON.parse(fs.readFileSync(input, 'utf8')) as {
    engineResume: unknown;
    agentResume: unknown;
    date?: unknown;
    machine?: unknown;
  };
  writeResumeChart(results, subtitleOf(results), out);
  console.log(`wrote ${out} from ${input}`);
}
