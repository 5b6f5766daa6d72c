// Test-only fault injection for kill tests (test/faults): with KVFABRIC_TEST_PAUSE_IN=<activity type>
// (offload, restore, appendTurn) and KVFABRIC_TEST_PAUSE_FLAG=<file>, the first cold-tier write or read (segment
// or manifest) inside that activity completes, then the worker writes the flag file and waits forever. Bytes have
// moved, the operation has not finished: a SIGKILL sent once the flag exists lands mid-operation every time,
// with no race against the transfer's speed. With KVFABRIC_TEST_PAUSE_UNTIL_GONE=1 the worker goes on once
// the flag file is deleted (a slow holder: frozen with SIGSTOP meanwhile, then woken with SIGCONT).
// Unset (always, outside tests), nothing is wrapped.
import { existsSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

import { Context } from '@temporalio/activity';

import type { ColdStore } from '../tiers/cold';

export function pauseForKillTests(cold: ColdStore, env: NodeJS.ProcessEnv = process.env): void {
  const activity = env.KVFABRIC_TEST_PAUSE_IN;
  const flag = env.KVFABRIC_TEST_PAUSE_FLAG;
  if (!activity || !flag) return;
  // KVFABRIC_TEST_PAUSE_SKIP=n lets the first n executions of the activity run through (a turn before the fatal one).
  const skip = Number(env.KVFABRIC_TEST_PAUSE_SKIP ?? '0');
  const untilGone = env.KVFABRIC_TEST_PAUSE_UNTIL_GONE === '1';
  const seen = new Set<string>();
  let paused = false;
  const pauseAfter = <A extends unknown[], R>(call: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      const result = await call(...args);
      const info = activityInfo();
      if (info?.activityType === activity) seen.add(info.activityId);
      if (!paused && info?.activityType === activity && seen.size > skip) {
        paused = true;
        writeFileSync(flag, `${activity} ${process.pid}\n`);
        if (!untilGone) await new Promise<never>(() => undefined); // until SIGKILL
        while (existsSync(flag)) await sleep(20);
      }
      return result;
    };
  cold.writeSegment = pauseAfter(cold.writeSegment.bind(cold));
  cold.readBlocks = pauseAfter(cold.readBlocks.bind(cold));
  cold.writeManifest = pauseAfter(cold.writeManifest.bind(cold));
}

function activityInfo(): { activityType: string; activityId: string } | undefined {
  try {
    return Context.current().info;
  } catch {
    return undefined; // not inside an activity (drain, background maintenance)
  }
}
