// `npx kvfabric-worker` and npm scripts run the worker through `sh -c`, and npm forwards SIGINT and SIGTERM
// to that shell only. dash (Debian's and Ubuntu's /bin/sh) dies of the signal without passing it on, so
// the worker would never hear it: it would run on, orphaned, holding its contexts, while npm reports it
// stopped. A worker that npm started therefore takes the loss of the process that started it as its
// shutdown signal: it stops and drains as on SIGTERM. Started any other way (a process manager, a shell's
// `exec`, `nohup`), it ignores its parent: there the signal reaches it directly.
const PARENT_CHECK_MS = 500;

export interface ParentWatch {
  stop(): void;
}

/** Whether npm (npx, npm exec, npm run, npm start) started this process. */
export function startedByNpm(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.npm_lifecycle_event !== undefined;
}

/**
 * Calls `onGone` once when this process's parent is no longer `parent` (the pid it had at start: it died
 * and the process was re-parented), checking at once and then every PARENT_CHECK_MS.
 */
export function watchParent(parent: number, onGone: () => void): ParentWatch {
  const check = (): boolean => {
    if (process.ppid === parent) return false;
    clearInterval(timer);
    onGone();
    return true;
  };
  const timer = setInterval(check, PARENT_CHECK_MS);
  timer.unref(); // never the reason the process stays up
  check();
  return { stop: () => clearInterval(timer) };
}
