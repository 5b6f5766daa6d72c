// Workflow timers by the instant they are due, so that one started ahead of its use can be waited on
// later without a second start: the idle timer that follows a planned wake-up's prefetch starts with the
// plan (timers.ts), and the prefetch's workflow task then starts none. Every start and cancel is a history
// event; a wait that is interrupted cancels its timer unless it was started ahead.
import { CancellationScope, condition, sleep } from '@temporalio/workflow';

interface DueTimer {
  scope: CancellationScope;
  fired: boolean;
}

export class DueTimers {
  private readonly running = new Map<number, DueTimer>();

  /** Starts the timer due at `due` (workflow time, ms) unless it runs already. */
  start(due: number): DueTimer {
    const running = this.running.get(due);
    if (running) return running;
    const timer: DueTimer = { scope: new CancellationScope(), fired: false };
    timer.scope
      .run(() => sleep(Math.max(due - Date.now(), 1)))
      .then(
        () => (timer.fired = true),
        () => undefined, // cancelled
      );
    this.running.set(due, timer);
    return timer;
  }

  /**
   * Waits until `due` or until `interrupted`. An interrupted wait cancels its timer, as a condition's
   * timeout does, unless `keep` says the timer is still wanted (one started ahead of its use).
   */
  async until(due: number, interrupted: () => boolean, keep: (due: number) => boolean): Promise<void> {
    const timer = this.start(due);
    await condition(() => timer.fired || interrupted());
    if (timer.fired || !keep(due)) this.stop(due);
  }

  /** Cancels every timer not due at one of `dues`. */
  keepOnly(dues: readonly number[]): void {
    for (const due of [...this.running.keys()]) if (!dues.includes(due)) this.stop(due);
  }

  private stop(due: number): void {
    const timer = this.running.get(due);
    this.running.delete(due);
    if (timer && !timer.fired) timer.scope.cancel();
  }
}
