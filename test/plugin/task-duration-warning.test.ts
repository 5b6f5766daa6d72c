// The plugin raises the SDK core's `[TMPRL1104] Workflow task duration exceeded 5 seconds` threshold,
// which a long model turn (a local activity inside the workflow task) passes with nothing wrong, unless
// the operator set it.
import { describe, expect, it } from 'vitest';

import { TASK_DURATION_WARN_ENV, TASK_DURATION_WARN_S, quietLongTurnWarnings } from '../../src/plugin/task-duration-warning';

describe('quietLongTurnWarnings', () => {
  it("sets the core's threshold to the longest turn", () => {
    const env: NodeJS.ProcessEnv = {};
    quietLongTurnWarnings(env);
    expect(env[TASK_DURATION_WARN_ENV]).toBe(String(TASK_DURATION_WARN_S));
  });

  it("keeps the operator's own", () => {
    const env: NodeJS.ProcessEnv = { [TASK_DURATION_WARN_ENV]: '30' };
    quietLongTurnWarnings(env);
    expect(env[TASK_DURATION_WARN_ENV]).toBe('30');
  });
});
