// The workflow-task timeout of agent workflows (docs/agents.md#failover-timing). A call that reaches an
// agent just as its worker is killed may have its workflow task taken by the dead worker's poll, still open
// at the server; that task then waits out this timeout before another worker runs it, and only then does
// the holder-loss timeout begin. The SDK's default (10 s) would make a call at the instant of a crash wait
// 10 s longer than one a few seconds later.
//
// Shorter is safe for an agent workflow's tasks: each runs a few operations' code on a short history (it
// continues as new when Temporal suggests it), and a task that runs a local activity (a local turn or
// resume, however long the prefill) is heartbeated by the SDK, which completes it and opens the next one at
// 80% of this timeout (three history events per stretch). Set where an agent workflow starts (AgentClient,
// startAgentChild, forks); continue-as-new keeps the run's timeout.
export const AGENT_WORKFLOW_TASK_TIMEOUT_MS = 2000;
