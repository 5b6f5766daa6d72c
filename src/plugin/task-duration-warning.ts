// The SDK core warns `[TMPRL1104] Workflow task duration exceeded 5 seconds` for every workflow task
// longer than that. An agent's turn and resume run inside its workflow task, as local activities on the
// holder (src/workflows/holder-calls.ts `locally`): a long prefill is such a task, and its warning reads
// as something broken when nothing is. The core reads its threshold once, from the environment, the
// first time it judges a task; the plugin raises it before its worker runs, unless the operator set it.

/** The core's setting: whole seconds. */
export const TASK_DURATION_WARN_ENV = 'TEMPORAL_WORKFLOW_TASK_DURATION_WARN_SECONDS';

/**
 * Ten minutes: the default attemptMs, the longest one turn may run before the workflow gives up on it
 * (DEFAULT_AGENT_CONFIG). A workflow task longer than any turn is still worth a warning.
 */
export const TASK_DURATION_WARN_S = 600;

/** Sets the core's threshold to TASK_DURATION_WARN_S unless it is set already; must run before this process's first workflow task. */
export function quietLongTurnWarnings(env: NodeJS.ProcessEnv = process.env): void {
  if (!env[TASK_DURATION_WARN_ENV]) env[TASK_DURATION_WARN_ENV] = String(TASK_DURATION_WARN_S);
}
