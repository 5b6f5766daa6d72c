// The agent's query and updates: each update is validated (refused before anything reaches history) and
// then queued as an operation; its failure reaches the caller typed (failures.ts). Set before the
// workflow's first await, so updates that arrive with the first workflow task find their handlers.
import type { UpdateDefinition } from '@temporalio/common';
import { setHandler } from '@temporalio/workflow';

import type { AgentOperations } from './agent-operations';
import type { AgentRun } from './agent-run';
import {
  forkUpdate,
  pinUpdate,
  releaseUpdate,
  renewUpdate,
  resumeUpdate,
  statusQuery,
  suspendUpdate,
  turnUpdate,
  unpinUpdate,
  type Credentials,
} from './definitions';
import { asUpdateFailure } from './failures';
import { checkCredentials, checkFork, checkRenew, checkSuspend, checkTurn } from './update-validators';

export function handleUpdates(run: AgentRun, operations: AgentOperations): void {
  const { state, input } = run;

  /** The update's validator and its body, run as an operation with typed failures. */
  function handle<A extends Credentials, R>(
    update: UpdateDefinition<R, [A]>,
    body: (args: A) => Promise<R>,
    check?: (args: A) => void,
  ): void {
    setHandler(
      update,
      (args: A) =>
        run
          .operation(() => body(args))
          .catch((err: unknown) => {
            throw asUpdateFailure(err, () => state.denials++);
          }),
      {
        validator: (args: A) => {
          checkCredentials(args, state, run.agentId);
          check?.(args);
        },
      },
    );
  }

  setHandler(statusQuery, () => run.status());
  handle(
    turnUpdate,
    (args) => operations.turn(args),
    (args) => checkTurn(args, input.config),
  );
  handle(
    suspendUpdate,
    (args) => operations.suspend(args),
    (args) => checkSuspend(args, state, run.agentId),
  );
  handle(resumeUpdate, (args) => operations.resume(args));
  handle(
    forkUpdate,
    (args) => operations.fork(args),
    (args) => checkFork(args, run.agentId),
  );
  handle(pinUpdate, (args) => operations.pin(args));
  handle(unpinUpdate, (args) => operations.unpin(args));
  handle(releaseUpdate, (args) => operations.release(args));
  handle(renewUpdate, (args) => operations.renew(args), checkRenew);
}
