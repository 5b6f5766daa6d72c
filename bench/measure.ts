// Timing helpers for benchmarks: run a body repeatedly for a fixed wall time after a warm-up, and
// report operations per second. Implementations are measured back to back in one run, so ratios
// between them hold even when absolute figures drift with machine noise.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';

/** The value after `name` on this process's command line (`--tokens 8k`), if any. */
export function option(name: string): string | undefined {
  const args = process.argv.slice(2);
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : undefined;
}

/** Real-model context sizes like `512,2k,8k`: `8k` is 8,000 (the model's trained 8,192 leaves room to continue), other `k`s 1,024. */
export function modelContextSizes(text: string): number[] {
  return text.split(',').map((s) => (s === '8k' ? 8000 : s.endsWith('k') ? Number(s.slice(0, -1)) * 1024 : Number(s)));
}

/** The middle value (the upper one of an even count): robust to one slow repeat on a shared machine. */
export function median(values: number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
}

/** A difference in milliseconds with its sign, `+3 ms` or `-12 ms`: how far over (or under) a bound. */
export function signedMs(value: number): string {
  return `${value >= 0 ? '+' : ''}${value.toFixed(0)} ms`;
}

export interface Rate {
  opsPerSecond: number;
  ops: number;
  seconds: number;
}

/** Calls body (which reports how many operations it did) until minSeconds have passed. */
export function measureRate(body: () => number, minSeconds = 1): Rate {
  const warmUntil = process.hrtime.bigint() + BigInt(Math.round(minSeconds * 2e8));
  while (process.hrtime.bigint() < warmUntil) body();
  let ops = 0;
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(minSeconds * 1e9));
  let now = start;
  while (now < end) {
    ops += body();
    now = process.hrtime.bigint();
  }
  const seconds = Number(now - start) / 1e9;
  return { opsPerSecond: ops / seconds, ops, seconds };
}

export function formatRate(perSecond: number): string {
  if (perSecond >= 1e6) return `${(perSecond / 1e6).toFixed(2)} M/s`;
  if (perSecond >= 1e3) return `${(perSecond / 1e3).toFixed(1)} k/s`;
  return `${perSecond.toFixed(1)} /s`;
}

export function printTable(headers: string[], rows: string[][]): void {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ');
  console.log(line(headers));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const row of rows) console.log(line(row));
}

/** Drops the page cache so the next read comes from the device; says whether it could (root on Linux). */
export function dropPageCache(): boolean {
  spawnSync('sync');
  try {
    fs.writeFileSync('/proc/sys/vm/drop_caches', '3');
    return true;
  } catch {
    return false;
  }
}
