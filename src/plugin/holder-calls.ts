// Calls on a holder's own queue are taken at once and wait for a slot inside the worker, heartbeating.
// The agent workflow takes a call that nobody takes for holderLossMs as the sign that its holder is gone
// (docs/agents.md#failover-timing). A live holder whose every activity slot is busy would leave calls
// untaken just the same, and be taken for lost while it works. So the holder's Worker takes every call it
// is offered (up to HOLDER_CALLS_TAKEN) and runs at most `running` at once, as many as before; the rest
// wait here, heartbeating: for a call taken, heartbeats, not the queue, are what prove the worker alive.
import { CancelledFailure, Context } from '@temporalio/activity';

/** Calls the holder's Worker takes at once: one per agent it holds is the most that can come (each agent's calls run one by one). */
export const HOLDER_CALLS_TAKEN = 1024;

/** How often a waiting call heartbeats; the worker's throttle decides how often the server hears it. */
const WAITING_HEARTBEAT_MS = 1000;

type Activity = (arg: never) => Promise<unknown>;

/** The same activities, at most `running` of them running at once, the others waiting their turn in order. */
export function queuedCalls<T extends object>(activities: T, running: number): T {
  const slots = new CallSlots(running);
  const queued: Record<string, Activity> = {};
  for (const [name, activity] of Object.entries(activities) as Array<[string, Activity]>) {
    queued[name] = async (arg) => {
      const release = await slots.take();
      try {
        return await activity(arg);
      } finally {
        release();
      }
    };
  }
  return queued as T;
}

/** A counting semaphore whose waiters heartbeat while they wait. Exported for its tests. */
export class CallSlots {
  private free: number;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly size: number) {
    if (!Number.isSafeInteger(size) || size < 1) throw new RangeError(`running calls must be an integer >= 1, got ${size}`);
    this.free = size;
  }

  /** Calls waiting for a slot now. */
  get queued(): number {
    return this.waiting.length;
  }

  /** Resolves with the slot's release once one is free (at once if one is). */
  async take(): Promise<() => void> {
    if (this.free > 0) {
      this.free--;
      return this.releaser();
    }
    let granted!: () => void;
    const turn = new Promise<void>((resolve) => (granted = resolve));
    this.waiting.push(granted);
    await this.waitHeartbeating(turn, granted);
    return this.releaser();
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      // The slot passes straight to the next waiter: `free` only grows when nobody waits.
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    };
  }

  private async waitHeartbeating(turn: Promise<void>, granted: () => void): Promise<void> {
    const context = activityContext();
    if (!context) return turn; // outside an activity (tests of the semaphore itself)
    const beat = (): void => context.heartbeat({ phase: 'queued', waiting: this.waiting.indexOf(granted) + 1 });
    beat();
    const timer = setInterval(beat, WAITING_HEARTBEAT_MS);
    try {
      await Promise.race([turn, givenUp(context)]);
    } catch (err) {
      // The server no longer waits for this call (timed out, cancelled): give up the place in line.
      const index = this.waiting.indexOf(granted);
      if (index >= 0) this.waiting.splice(index, 1);
      else this.releaser()(); // granted in the same tick: pass the slot on
      throw err;
    } finally {
      clearInterval(timer);
    }
  }
}

/**
 * Rejects when the call is cancelled for a reason that ends it. A worker shutting down cancels its calls
 * too (WORKER_SHUTDOWN), but a call it has taken is served before the drain, as a running one is: only the
 * server's own reasons (timed out, cancelled, not found) end the wait.
 */
function givenUp(context: Context): Promise<never> {
  return context.cancelled.catch((err: unknown) => {
    if (err instanceof CancelledFailure && err.message === 'WORKER_SHUTDOWN') return new Promise<never>(() => undefined);
    throw err;
  });
}

function activityContext(): Context | undefined {
  try {
    return Context.current();
  } catch {
    return undefined;
  }
}
