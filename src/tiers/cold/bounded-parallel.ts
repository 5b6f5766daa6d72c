// Bounded parallelism for the cold tier's I/O and crypto jobs: enough in flight to keep the disk and every
// crypto thread busy, few enough that memory stays bounded. After a failure no new task starts, running
// ones settle (so none is left rejecting unobserved), and the first error is the one reported.

/** Caps how many tasks hold a slot at once across every caller sharing it. */
export class Limiter {
  private active = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly slots: number) {}

  async run<T>(task: () => Promise<T>): Promise<T> {
    const release = await this.acquire();
    try {
      return await task();
    } finally {
      release();
    }
  }

  /**
   * A slot, held until the returned function is called (once). For a task that moves from one limiter to
   * the next hand over hand: it takes the next slot before it gives this one back.
   */
  async acquire(): Promise<() => void> {
    if (this.active >= this.slots) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.active++;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      // Hand the slot straight to the next waiter, or free it.
      const next = this.waiting.shift();
      if (next !== undefined) next();
      else this.active--;
    };
  }
}

/** Runs `task` for every item with at most `limiter.slots` at once; rejects with the first failure. */
export async function forEachBounded<T>(
  items: readonly T[],
  limiter: Limiter,
  task: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let failure: { error: unknown } | undefined;
  await Promise.all(
    items.map((item, index) =>
      limiter.run(async () => {
        if (failure !== undefined) return;
        try {
          await task(item, index);
        } catch (error) {
          failure ??= { error };
        }
      }),
    ),
  );
  if (failure !== undefined) throw failure.error;
}

/** `task` of every item, at most `slots` at once, results in order; rejects with the first failure. */
export async function mapBounded<T, R>(items: readonly T[], slots: number, task: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  await forEachBounded(items, new Limiter(slots), async (item, index) => {
    out[index] = await task(item);
  });
  return out;
}
