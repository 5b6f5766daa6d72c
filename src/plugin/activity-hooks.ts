// Test-only fault injection around the activities, kept out of the public options: a test hands the
// plugin its hooks on the options object under a symbol (withActivityHooks), which survives the spreads
// between a worker's config and the plugin, and which no user's options spell. Not exported by index.ts.
import type { ActivityHooks } from '../activities';

const ACTIVITY_HOOKS = Symbol('kvfabric.activityHooks');

type Hooked = { [ACTIVITY_HOOKS]?: ActivityHooks };

/** `options` with test hooks the plugin passes to its activities. */
export function withActivityHooks<T extends object>(options: T, hooks: ActivityHooks | undefined): T {
  return hooks ? { ...options, [ACTIVITY_HOOKS]: hooks } : options;
}

/** The hooks withActivityHooks put on `options`, if any. */
export function activityHooksOf(options: object): ActivityHooks | undefined {
  return (options as Hooked)[ACTIVITY_HOOKS];
}
