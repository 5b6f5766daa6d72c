// The AI SDK example runs as the README says (`npm run example:ai-sdk`): its own dev server, worker and
// research agent, every step after the first continuing the conversation's KV.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

const ROOT = join(__dirname, '..', '..');

describe('the AI SDK example', () => {
  it('runs its research agent, each step after the first evaluating only what it adds', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'examples', 'ai-sdk', 'run.ts')], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 240_000,
    });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    const steps = [...run.stdout.matchAll(/^step (\d): (.*); prompt tokens continued (\d+), evaluated (\d+)$/gm)];
    expect(steps.map((step) => step[2]!.split('(')[0])).toEqual(['called search', 'called read', 'called search', 'answered']);
    expect(Number(steps[0]![3])).toBe(0);
    for (const step of steps.slice(1)) {
      expect(Number(step[3])).toBeGreaterThan(300);
      expect(Number(step[4])).toBeLessThan(64);
    }
    expect(run.stdout).toMatch(/^answer: /m);
  }, 300_000);
});
