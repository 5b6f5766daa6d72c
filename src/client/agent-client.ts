// The client library: start agents, drive them through updates, read their status and find them by
// search attributes. Failures come back as FabricErrors with the worker's stable codes
// (PERMISSION_DENIED for a wrong capability, INTEGRITY for bytes that did not verify, ...). A namespace
// without kvfabric's search attributes gets them on the first start (search-attributes.ts); a client
// whose payload codec keys differ from its workers' learns it as PERMISSION_DENIED naming the key id
// (codec-refusals.ts), and an agent no worker can read is ended rather than left failing its tasks
// (unreadable-agents.ts). `start` waits for the agent's allocation, so a model the workers do not serve
// is refused there (first-allocation.ts); a call with no worker on the queue is UNAVAILABLE within
// seconds (queue-workers.ts).
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type WorkflowHandle,
} from '@temporalio/client';
import { ApplicationFailure, type UpdateDefinition } from '@temporalio/common';
import { decodeTypedSearchAttributes } from '@temporalio/common/lib/converter/payload-search-attributes';
import { decode } from '@temporalio/common/lib/internal-non-workflow';
import { temporal } from '@temporalio/proto';

import { AGENT_ID_RULE, agentWorkflowId, checkTenantName, isAgentId } from '../identity/agent-identity';
import { printable } from '../identity/printable-id';
import { ERROR_CODES, FabricError, isFabricError, type ErrorCode } from '../fabric/errors';
import { initialState, memoOf, searchAttributesOf } from '../workflows/agent-state';
import type { agentWorkflow } from '../workflows/agent';
import {
  AGENT_WORKFLOW_TYPE,
  DEFAULT_AGENT_CONFIG,
  custodyProof,
  forkUpdate,
  pinUpdate,
  releaseUpdate,
  renewUpdate,
  resumeUpdate,
  statusQuery,
  suspendUpdate,
  turnUpdate,
  unpinUpdate,
  wakeUpdate,
  type AgentConfig,
  type AgentInput,
  type AgentModel,
  type AgentStatus,
  type GenerationSettings,
  type TurnOutcome,
  type TurnReply,
} from '../workflows/definitions';
import { modelNamed } from '../engines/models';
import { KvAgentId, KvBlocks, KvPhase, KvTenant, KvTier, KvTokens } from '../workflows/search-attributes';
import { AGENT_WORKFLOW_TASK_TIMEOUT_MS } from '../workflows/task-timeout';
import type { Right } from '../security/claims';
import { dataConverterOf } from '../security/data-converter';
import { REFUSED_ENCODING_PREFIX } from '../security/refused-payloads';
import type { ClientSecurity } from './client-security';
import { mismatchError, refusalIn } from './codec-refusals';
import { messagesOf } from './error-chain';
import { confirmAllocated } from './first-allocation';
import { AgentQueueWorkers } from './queue-workers';
import { reachTemporal } from './reach-temporal';
import { withSearchAttributes, type NamespaceAddress } from './search-attributes';
import { connectionOptionsOf, type TemporalSettings } from './temporal-settings';
import { typedCause } from './typed-failure';
import { confirmReadable, endIfUnreadable, watchForUnreadable } from './unreadable-agents';

export interface AgentConfigOverrides {
  timers?: Partial<AgentConfig['timers']>;
  timeouts?: Partial<AgentConfig['timeouts']>;
  durability?: AgentConfig['durability'];
  maxTurnTokens?: number;
}

export interface StartAgentOptions {
  agentId: string;
  tenant: string;
  /** A catalog name (MODELS, modelNamed) or a model (default smollm2-135m: the default workers' model). */
  model?: string | AgentModel;
  config?: AgentConfigOverrides;
  /**
   * The agent's capability; minted by this client's issuer when absent (all rights, bound to the agent's
   * workflow). Keep it: every later call needs it.
   */
  capability?: string;
  /** The custodian token the agent's workflow carries (see mintCustodian); minted from `capability` when absent. */
  custodian?: string;
}

/** @experimental A listing's fields follow the search attributes. */
export interface AgentListing {
  agentId: string;
  tenant: string;
  phase?: string;
  tier?: string;
  tokens?: number;
  blocks?: number;
  /** The workflow's status: RUNNING, COMPLETED, ... */
  status: string;
  workflowId: string;
}

/** An agent a listing left out: this client cannot read its payloads (sealed with a codec key it lacks). */
export interface SkippedAgent {
  agentId: string;
  workflowId: string;
  /** The workflow's status: RUNNING, COMPLETED, ... */
  status: string;
  /** Why, naming the key id, e.g. `payload sealed with key 'k2', which this process does not hold`. */
  reason: string;
}

export interface AgentList {
  agents: AgentListing[];
  skipped: SkippedAgent[];
}

/** @experimental */
export interface ListFilter {
  tenant?: string;
  tier?: string;
  phase?: string;
  /** Released agents too (default: running ones only). */
  includeClosed?: boolean;
  limit?: number;
}

export function agentConfig(overrides: AgentConfigOverrides = {}): AgentConfig {
  return {
    timers: { ...DEFAULT_AGENT_CONFIG.timers, ...overrides.timers },
    timeouts: { ...DEFAULT_AGENT_CONFIG.timeouts, ...overrides.timeouts },
    durability: overrides.durability ?? DEFAULT_AGENT_CONFIG.durability,
    maxTurnTokens: overrides.maxTurnTokens ?? DEFAULT_AGENT_CONFIG.maxTurnTokens,
  };
}

export class AgentClient {
  /** Whether a worker serves an agent's queue: a call with nobody to answer it is UNAVAILABLE at once. */
  private readonly queueWorkers: AgentQueueWorkers;

  constructor(
    readonly client: Client,
    /** The shared task queue the GPU workers poll. */
    readonly taskQueue: string,
    /** Signing keys (control plane only) and capability lifetime; the codec is the Client's own. */
    readonly security: Omit<ClientSecurity, 'codec'> = {},
    readonly connection?: Connection,
  ) {
    this.queueWorkers = new AgentQueueWorkers(client, async (agentId) => (await this.workflow(agentId).describe()).taskQueue);
  }

  static async connect(settings: TemporalSettings, security: ClientSecurity, taskQueue = 'kvfabric'): Promise<AgentClient> {
    const connectTimeout = settings.connectTimeoutMs === undefined ? {} : { connectTimeout: settings.connectTimeoutMs };
    const connection = await reachTemporal(settings, () => Connection.connect({ ...connectionOptionsOf(settings), ...connectTimeout }));
    const client = new Client({ connection, namespace: settings.namespace, dataConverter: dataConverterOf(security.codec) });
    return new AgentClient(client, taskQueue, security, connection);
  }

  /** A capability for a new agent: every right, bound to its workflow, at a fresh epoch. */
  mintCapability(agentId: string, tenant: string, rights?: readonly Right[]): string {
    return this.issuer().mint({ tenant, agentId, workflowId: agentWorkflowId(agentId), ...(rights ? { rights } : {}), ...this.lifetime() });
  }

  /** A fork's capability: the parent's tenant, at most its rights, expiring no later. */
  mintChildCapability(parentCapability: string, childId: string): string {
    return this.issuer().mintChild(parentCapability, { agentId: childId, workflowId: agentWorkflowId(childId) });
  }

  /** A renewal's replacement: the current token's identity and rights (it must verify), a fresh epoch and expiry. */
  mintRenewal(currentCapability: string): string {
    return this.issuer().renewal(currentCapability, this.lifetime());
  }

  /**
   * The custodian token of an agent's capability: what the agent's workflow carries for its timers and
   * failovers (offload, recover, pin), and nothing a caller does (read, append, fork, release).
   */
  mintCustodian(capability: string): string {
    return this.issuer().mintCustodian(capability);
  }

  private issuer() {
    if (!this.security.issuer)
      throw new FabricError(
        'INVALID_ARGUMENT',
        'this client holds no signing key (KVFABRIC_SIGNING_KEYS): pass a capability minted by the control plane',
      );
    return this.security.issuer;
  }

  private lifetime(): { lifetimeS?: number } {
    return this.security.capabilityLifetimeS === undefined ? {} : { lifetimeS: this.security.capabilityLifetimeS };
  }

  async start(options: StartAgentOptions): Promise<AgentHandle> {
    if (!isAgentId(options.agentId)) {
      throw new FabricError('INVALID_ARGUMENT', `agent id must be ${AGENT_ID_RULE}`);
    }
    checkTenantName(options.tenant); // the worker's rule for tenant names, checked before a workflow exists
    const model = typeof options.model === 'object' ? options.model : modelNamed(options.model ?? 'smollm2-135m');
    const capability = options.capability ?? this.mintCapability(options.agentId, options.tenant);
    // The workflow carries the custodian; the caller keeps the agent's own token.
    const custodian = options.custodian ?? this.mintCustodian(capability);
    const input: AgentInput = {
      agentId: options.agentId,
      tenant: options.tenant,
      capability: custodian,
      model,
      config: agentConfig(options.config),
    };
    let runId: string;
    try {
      // A fresh namespace lacks kvfabric's search attributes: the start registers them and runs again.
      const started = await withSearchAttributes(this.client.connection, this.namespaceAddress(), () =>
        this.client.workflow.start<typeof agentWorkflow>(AGENT_WORKFLOW_TYPE, {
          workflowId: agentWorkflowId(options.agentId),
          taskQueue: this.taskQueue,
          args: [input],
          memo: memoOf(input),
          typedSearchAttributes: searchAttributesOf(input, initialState(input)),
          workflowTaskTimeout: AGENT_WORKFLOW_TASK_TIMEOUT_MS,
        }),
      );
      runId = started.firstExecutionRunId;
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError)
        throw new FabricError('INVALID_ARGUMENT', `agent ${options.agentId} already exists`);
      throw err;
    }
    // A worker refuses an agent of a model its pool is not made for: the start fails, naming the worker's.
    if (await confirmReadable(this.client, this.taskQueue, options.agentId, runId))
      await confirmAllocated(this.client, options.agentId, runId, model.name);
    return this.agent(options.agentId, capability, custodian);
  }

  /**
   * Runs an update or query on an agent; its failure as a FabricError with the code the worker or the
   * workflow chose, a codec refusal as PERMISSION_DENIED naming the key.
   */
  async translate<T>(agentId: string, call: () => Promise<T>): Promise<T> {
    // With no worker on the queue nothing would answer: UNAVAILABLE now, before anything is sent.
    await this.queueWorkers.expectServed(agentId);
    const stopWatching = new AbortController();
    const watch: { error?: FabricError } = {};
    try {
      const answer = call();
      answer.catch(() => undefined); // when the watch below wins, the call's own end is of no interest
      return await Promise.race([answer, watchForUnreadable(this.client, agentId, watch, stopWatching.signal)]);
    } catch (err) {
      // The watch ended the run: the call then fails for that ("not found"), and the watch's error is why.
      if (watch.error) throw watch.error;
      if (isFabricError(err)) throw err;
      const refusal = refusalIn(err);
      // In a failure the worker sent, the refusal is the worker's; thrown while reading the answer, it is this client's.
      if (refusal) throw mismatchError(agentId, refusal, err instanceof WorkflowUpdateFailedError ? 'worker' : 'client');
      if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure) {
        throw new FabricError(asCode(err.cause.type), err.cause.message);
      }
      // A released agent's workflow has completed; the server answers updates to it with "not found" too.
      if (err instanceof Error && /already completed/i.test(err.message)) throw await this.endedAgentError(agentId);
      if (err instanceof WorkflowNotFoundError) throw new FabricError('STALE_HANDLE', `no agent ${agentId}`);
      // The server's own wait for a query (30 s): the queue's last worker stopped less than POLLER_FRESH_MS ago, or a long turn runs.
      if (/query timed out before a worker could process it/i.test(messagesOf(err)))
        throw new FabricError(
          'UNAVAILABLE',
          `agent ${agentId}: no worker answered within the server's wait: ` +
            `the workers of task queue '${printable(this.queueWorkers.queue(agentId) ?? this.taskQueue)}' stopped, ` +
            "or the agent's workflow task (a long turn) is still running",
        );
      // The server stops taking calls to a workflow whose tasks keep failing: a codec refusal of its input?
      if (/workflow task in failed state/i.test(messagesOf(err))) {
        const ended = await endIfUnreadable(this.client, agentId);
        if (ended) throw ended;
      }
      throw err;
    } finally {
      stopWatching.abort();
    }
  }

  /** Why an agent's workflow takes no more calls: released, or failed (a refusal at its start when no worker polled then). */
  private async endedAgentError(agentId: string): Promise<FabricError> {
    const failure = this.workflow(agentId)
      .result()
      .then(
        () => undefined,
        (err: unknown) => typedCause(err),
      );
    // A run started again under the id meanwhile would keep result() waiting: not this call's answer.
    const ended = await Promise.race([failure, sleep(5000, undefined, { ref: false })]);
    return ended
      ? new FabricError(ended.type, `agent ${agentId} ended: ${ended.message}`)
      : new FabricError('INVALID_STATE', `agent ${agentId} is released`);
  }

  private namespaceAddress(): NamespaceAddress {
    const options = (this.client.connection as Partial<Connection>).options;
    const address = options?.address;
    // Temporal Cloud's endpoints: <namespace>.<account>.tmprl.cloud (mTLS) and <region>.<cloud>.api.temporal.io (API keys).
    const cloud = /\.(tmprl\.cloud|api\.temporal\.io)(:\d+)?$/.test(address ?? '');
    return { namespace: this.client.options.namespace, ...(address ? { address } : {}), cloud };
  }

  /**
   * A handle on an existing agent, acting with `capability`; with the agent's `custodian` (the token its
   * workflow carries, which whoever started it minted) the handle may also plan its wake-ups.
   */
  agent(agentId: string, capability: string, custodian?: string): AgentHandle {
    return new AgentHandle(this, agentId, capability, custodian);
  }

  /**
   * Plans the agent's wake-up as its owner (docs/agents.md#planned-wake-ups): its context is brought back
   * to the engine ahead of `at` (a Date or ms since the epoch; null cancels the plan; a new plan replaces
   * the old). Only the proof of `custodian`, the custodian token the agent's workflow carries, is sent,
   * as the update's sealed argument: the workflow refuses any other proof (PERMISSION_DENIED).
   */
  async wake(agentId: string, custodian: string, at: Date | number | null, { requestId }: CallOptions = {}): Promise<AgentStatus> {
    const args = { at: wakeInstant(at), proof: custodyProof(custodian) };
    const updateId = requestId === undefined ? freshUpdateId() : updateIdOf(wakeUpdate.name, requestId);
    return this.translate(agentId, () => this.workflow(agentId).executeUpdate(wakeUpdate, { args: [args], updateId }));
  }

  async status(agentId: string): Promise<AgentStatus> {
    return this.translate(agentId, () => this.workflow(agentId).query(statusQuery));
  }

  /**
   * Agents by their search attributes. Listing reads only those (never encrypted) and the memo, which it
   * opens only to see whether this client can: an agent sealed with a codec key this client lacks is
   * left out and named in `skipped`, instead of failing the whole listing.
   */
  async list(filter: ListFilter = {}): Promise<AgentList> {
    const clauses = [`WorkflowType = '${AGENT_WORKFLOW_TYPE}'`];
    if (!filter.includeClosed) clauses.push(`ExecutionStatus = 'Running'`);
    if (filter.tenant) clauses.push(`${KvTenant.name} = ${quote(filter.tenant)}`);
    if (filter.tier) clauses.push(`${KvTier.name} = ${quote(filter.tier)}`);
    if (filter.phase) clauses.push(`${KvPhase.name} = ${quote(filter.phase)}`);
    const query = clauses.join(' AND ');
    const list: AgentList = { agents: [], skipped: [] };
    let nextPageToken: Uint8Array | undefined;
    do {
      // The raw call: the SDK's list decodes every memo and fails the whole listing on one it cannot read.
      const page = await withSearchAttributes(this.client.connection, this.namespaceAddress(), () =>
        this.client.workflowService.listWorkflowExecutions({
          namespace: this.client.options.namespace,
          query,
          ...(nextPageToken ? { nextPageToken } : {}),
        }),
      );
      for (const execution of page.executions ?? []) {
        const workflowId = execution.execution?.workflowId ?? '';
        const attributes = decodeTypedSearchAttributes(execution.searchAttributes?.indexedFields);
        const agentId = attributes.get(KvAgentId) ?? workflowId;
        const status = statusName(execution.status);
        const reason = await this.unreadable(execution.memo?.fields);
        if (reason !== undefined) {
          list.skipped.push({ agentId, workflowId, status, reason });
          continue;
        }
        list.agents.push({
          agentId,
          tenant: attributes.get(KvTenant) ?? '',
          ...optional('phase', attributes.get(KvPhase)),
          ...optional('tier', attributes.get(KvTier)),
          ...optional('tokens', attributes.get(KvTokens)),
          ...optional('blocks', attributes.get(KvBlocks)),
          status,
          workflowId,
        });
        if (filter.limit !== undefined && list.agents.length >= filter.limit) return list;
      }
      nextPageToken = page.nextPageToken && page.nextPageToken.length > 0 ? page.nextPageToken : undefined;
    } while (nextPageToken);
    return list;
  }

  /** Why this client's codecs cannot open an agent's memo; undefined when they can (or there is none). */
  private async unreadable(memo: Record<string, temporal.api.common.v1.IPayload> | null | undefined): Promise<string | undefined> {
    const payloads = Object.values(memo ?? {});
    if (payloads.length === 0) return undefined;
    const opened = await decode(this.client.options.loadedDataConverter.payloadCodecs, payloads);
    for (const payload of opened) {
      const encoding = Buffer.from(payload.metadata?.encoding ?? []).toString('utf8');
      if (encoding.startsWith(REFUSED_ENCODING_PREFIX))
        return refusalIn(encoding)?.reason.replace('this process', 'this client') ?? encoding;
    }
    return undefined;
  }

  workflow(agentId: string): WorkflowHandle<typeof agentWorkflow> {
    return this.client.workflow.getHandle<typeof agentWorkflow>(agentWorkflowId(agentId));
  }

  async close(): Promise<void> {
    await this.connection?.close();
  }
}

/**
 * Options of every call that changes an agent. `requestId` is the caller's id for the request: the call
 * becomes the Temporal update `${update}/${requestId}`, so an application that retries a call after
 * losing its answer (a timeout, a crash) gets the first call's result back instead of a second turn.
 * Temporal deduplicates update ids within one workflow run: a retry that lands after the agent's
 * workflow continued as new is applied again. Without it each call is new.
 */
export interface CallOptions {
  requestId?: string;
}

export interface ForkOptions extends CallOptions {
  /** The child's custodian token (mintCustodian of the child capability); minted here when absent. */
  childCustodian?: string;
}

export interface RenewOptions extends CallOptions {
  /** The replacement's custodian token (mintCustodian of `next`); minted here when absent. */
  nextCustodian?: string;
}

/** One agent, as seen by a caller holding a capability. */
export class AgentHandle {
  constructor(
    private readonly agents: AgentClient,
    readonly agentId: string,
    /** Secret: never print it. */
    readonly capability: string,
    /** The custodian token the agent's workflow carries, when this handle's owner knows it (wake). Secret. */
    readonly custodian?: string,
  ) {}

  /**
   * A turn: a message to the worker's model (the reply comes back in `reply`), or, for the synthetic
   * engine of tests and benchmarks, a token count.
   */
  turn(input: number | { message: string; generation?: GenerationSettings }, options: CallOptions = {}): Promise<TurnOutcome> {
    const turn = typeof input === 'number' ? { tokens: input } : input;
    return this.update(turnUpdate, { capability: this.capability, ...turn }, options);
  }

  /** Says `message` to the agent and returns the model's reply (greedy unless `generation` says otherwise). */
  async say(message: string, generation?: GenerationSettings, options: CallOptions = {}): Promise<TurnReply> {
    const outcome = await this.turn({ message, ...(generation ? { generation } : {}) }, options);
    if (!outcome.reply) throw new FabricError('INVALID_STATE', `agent ${this.agentId}'s worker runs no model: its turns take tokens`);
    return outcome.reply;
  }

  suspend(tier: 'host' | 'disk' = 'disk', options: CallOptions = {}): Promise<AgentStatus> {
    return this.update(suspendUpdate, { capability: this.capability, tier }, options);
  }

  resume(options: CallOptions = {}): Promise<AgentStatus> {
    return this.update(resumeUpdate, { capability: this.capability }, options);
  }

  /**
   * Forks a child agent sharing this agent's blocks; the child gets its own capability. A retried fork
   * (`requestId`) must carry the child capability of the first try: a fresh one would not be the child's.
   */
  async fork(childId: string, childCapability?: string, options: ForkOptions = {}): Promise<{ child: AgentHandle; status: AgentStatus }> {
    if (options.requestId !== undefined && childCapability === undefined) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        'a fork with a request id needs its child capability, minted once before the first try (mintChildCapability)',
      );
    }
    childCapability ??= this.agents.mintChildCapability(this.capability, childId);
    // A custodian minted again on a retry is as good as the first: same epoch and expiry as the child's token.
    const childCustodian = options.childCustodian ?? this.agents.mintCustodian(childCapability);
    const outcome = await this.update(forkUpdate, { capability: this.capability, childId, childCapability, childCustodian }, options);
    return { child: this.agents.agent(childId, childCapability, childCustodian), status: outcome.child };
  }

  pin(options: CallOptions = {}): Promise<AgentStatus> {
    return this.update(pinUpdate, { capability: this.capability }, options);
  }

  unpin(options: CallOptions = {}): Promise<AgentStatus> {
    return this.update(unpinUpdate, { capability: this.capability }, options);
  }

  release(options: CallOptions = {}): Promise<AgentStatus> {
    return this.update(releaseUpdate, { capability: this.capability }, options);
  }

  /**
   * Replaces this agent's capability with a fresh one (a new expiry; `next` or one minted by this
   * client's issuer), gives the workflow the new one's custodian, and revokes the old ones: returns the
   * handle acting with the new. A retried renewal (`requestId`) must carry the `next` of the first try.
   */
  async renew(next?: string, options: RenewOptions = {}): Promise<AgentHandle> {
    if (options.requestId !== undefined && next === undefined) {
      throw new FabricError(
        'INVALID_ARGUMENT',
        'a renewal with a request id needs its next capability, minted once before the first try (mintCapability)',
      );
    }
    next ??= this.agents.mintRenewal(this.capability);
    const nextCustodian = options.nextCustodian ?? this.agents.mintCustodian(next);
    await this.update(renewUpdate, { capability: this.capability, next, nextCustodian }, options);
    return this.agents.agent(this.agentId, next, nextCustodian);
  }

  /**
   * Plans this agent's wake-up: its context is back in the engine by `at` (a Date or ms since the epoch;
   * null cancels). The owner's call: the handle needs the agent's custodian token (a handle from start,
   * fork or renew has it; agents.agent(id, capability, custodian) otherwise). AgentClient.wake says more.
   */
  wake(at: Date | number | null, options: CallOptions = {}): Promise<AgentStatus> {
    if (this.custodian === undefined)
      return Promise.reject(
        new FabricError(
          'INVALID_ARGUMENT',
          `planning agent ${this.agentId}'s wake-up takes its custodian token, which this handle lacks: ` +
            'use the handle start, fork or renew returned, or agents.agent(agentId, capability, custodian)',
        ),
      );
    return this.agents.wake(this.agentId, this.custodian, at, options);
  }

  status(): Promise<AgentStatus> {
    return this.agents.status(this.agentId);
  }

  private update<R, A>(definition: UpdateDefinition<R, [A]>, args: A, { requestId }: CallOptions): Promise<R> {
    const updateId = requestId === undefined ? freshUpdateId() : updateIdOf(definition.name, requestId);
    return this.agents.translate(this.agentId, () =>
      this.agents.workflow(this.agentId).executeUpdate(definition, { args: [args], updateId }),
    );
  }
}

/** A wake-up's instant as the update takes it: ms since the epoch, or null; a Date that is no time is refused. */
function wakeInstant(at: Date | number | null): number | null {
  if (at === null) return null;
  const ms = at instanceof Date ? at.getTime() : at;
  if (!Number.isSafeInteger(ms) || ms < 0)
    throw new FabricError('INVALID_ARGUMENT', `a wake-up is at a time (a Date, or whole ms since the epoch) or null, got ${String(at)}`);
  return ms;
}

/** The update id of a caller's request: the update's name keeps one request id from meaning two calls. */
export function updateIdOf(update: string, requestId: string): string {
  if (requestId.length === 0 || requestId.length > 200) throw new FabricError('INVALID_ARGUMENT', 'a request id has 1 to 200 characters');
  return `${update}/${requestId}`;
}

/**
 * An update id for a call without a request id: 128 random bits in 22 characters. The SDK's default, a
 * 36-character UUID, is written five times into the history of every update.
 */
function freshUpdateId(): string {
  return randomBytes(16).toString('base64url');
}

/** RUNNING, COMPLETED, ...: a raw listing's status as the SDK names it. */
function statusName(status: temporal.api.enums.v1.WorkflowExecutionStatus | null | undefined): string {
  return (temporal.api.enums.v1.WorkflowExecutionStatus[status ?? 0] ?? 'UNSPECIFIED').replace('WORKFLOW_EXECUTION_STATUS_', '');
}

function asCode(type: string | undefined | null): ErrorCode {
  return (ERROR_CODES as readonly string[]).includes(type ?? '') ? (type as ErrorCode) : 'UNAVAILABLE';
}

function quote(value: string): string {
  return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

function optional<K extends string, V>(key: K, value: V | undefined): Partial<Record<K, V>> {
  return value === undefined ? {} : ({ [key]: value } as Record<K, V>);
}
