// Keeps a worker's process alive until its drain is done, whatever signal handlers its dependencies
// installed. Temporal's runtime shuts the workers down on its shutdown signals (SIGINT, SIGTERM unless the
// user's Runtime says otherwise) and stops listening at the first one. signal-exit (in node-llama-cpp's
// dependencies, and in many CLIs') listens too, and when it finds no listener but its own it re-raises
// the signal, which kills the process at once (exit 143 on SIGTERM) with every held context undrained.
// A listener of ours on each of those signals, from the worker's start until its drain is done, is one
// more listener, so signal-exit leaves the process alone; it also says what the process is doing.
import { Runtime } from '@temporalio/worker';

export interface DrainSignals {
  /** Stops listening: the drain is done and the process may end as its own code says. */
  release(): void;
}

type SignalHandler = (signal: NodeJS.Signals) => void;

/** Every worker of this process still running or draining; one process listener per signal serves them all. */
const holds = new Set<SignalHandler>();
let heldSignals: NodeJS.Signals[] = [];

function dispatch(signal: NodeJS.Signals): void {
  for (const hold of holds) hold(signal);
}

/** Listens on the runtime's shutdown signals; `onSignal` runs on each (the first starts the shutdown). */
export function holdShutdownSignals(onSignal: (signal: NodeJS.Signals, first: boolean) => void): DrainSignals {
  let received = 0;
  const hold: SignalHandler = (signal) => onSignal(signal, ++received === 1);
  if (holds.size === 0) {
    // Only the runtime's own: a user who handles a signal themselves (shutdownSignals without it) keeps it.
    heldSignals = [...Runtime.instance().options.shutdownSignals];
    for (const signal of heldSignals) process.on(signal, dispatch);
  }
  holds.add(hold);
  return {
    release() {
      if (!holds.delete(hold) || holds.size > 0) return;
      for (const signal of heldSignals) process.off(signal, dispatch);
      heldSignals = [];
    },
  };
}
