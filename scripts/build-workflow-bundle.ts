// Writes the agent workflow's bundle ahead of time (build/workflow-bundle.js), for compiled workers: the
// worker plugin loads it instead of running webpack at every worker start (src/plugin/workflow-bundle.ts).
import { join } from 'node:path';

import { writeAgentWorkflowBundle } from '../src/plugin/workflow-bundle';

writeAgentWorkflowBundle(join(__dirname, '..'))
  .then((path) => console.log(`agent workflow bundle: ${path}`))
  .catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
