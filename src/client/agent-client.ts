// The client library: start agents, drive them through updates, read their status and find them by
// search attributes. Failures come back as FabricErrors with the worker's stable codes
// (PERMISSION_DENIED for a wrong capability, INTEGRITY for bytes that did not verify, ...).
import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type WorkflowHandle,
} from '@temporalio/client';
import { ApplicationFailure, type UpdateDefinition } from '@temporalio/common';

import { AGENT_ID_RULE, agentWorkflowId, checkTenantName, isAgentId } from '../identity/agent-identity';
import { ERROR_CODES, FabricError, type ErrorCode } from '../fabric/errors';
import { initialState, memoOf, searchAttributesOf } from '../workflows/agent-state';
import type { agentWorkflow } from '../workflows/agent';
import {
  AGENT_WORKFLOW_TYPE,
  DEFAULT_AGENT_CONFIG,
  forkUpdate,
  pinUpdate,
  releaseUpdate,
  renewUpdate,
  resumeUpdate,
  statusQuery,
  suspendUpdate,
  turnUpdate,
  unpinUpdate,
  type AgentConfig,
  type AgentInput,
  type AgentModel,
  type AgentStatus,
  type TurnGeneration,
  type TurnOutcome,
  type TurnReply,
} from '../workflows/definitions';
import { modelNamed } from '../workflows/models';
import { KvAgentId, KvBlocks, KvPhase, KvTenant, KvTier, KvTokens } from '../workflows/search-attributes';
import type { Right } from '../security/claims';
import { dataConverterOf } from '../security/data-converter';
import type { ClientSecurity } from './client-security';
import { reachTemporal } from './reach-temporal';
import { connectionOptionsOf, type TemporalSettings } from './temporal-settings';

export interface AgentConfigOverrides {
  timers?: Partial<AgentConfig['timers']>;
  timeouts?: Partial<AgentConfig['timeouts']>;
  durability?: AgentConfig['durability'];
  verifyRestores?: AgentConfig['verifyRestores'];
  maxTurnTokens?: number;
}

export interface StartAgentOptions {
  agentId: string;
  tenant: string;
  /** A catalog name (see workflows/models.ts) or a model (default smollm2-135m: the default workers' model). */
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
    verifyRestores: overrides.verifyRestores ?? DEFAULT_AGENT_CONFIG.verifyRestores,
    maxTurnTokens: overrides.maxTurnTokens ?? DEFAULT_AGENT_CONFIG.maxTurnTokens,
  };
}

export class AgentClient {
  constructor(
    readonly client: Client,
    /** The shared task queue the GPU workers poll. */
    readonly taskQueue: string,
    /** Signing keys (control plane only) and capability lifetime; the codec is the Client's own. */
    readonly security: Omit<ClientSecurity, 'codec'> = {},
    readonly connection?: Connection,
  ) {}

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
    if (!this.security.issuer) throw new FabricError('INVALID_ARGUMENT', 'this client holds no signing key (KVFABRIC_SIGNING_KEYS): pass a capability minted by the control plane');
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
    const input: AgentInput = { agentId: options.agentId, tenant: options.tenant, capability: custodian, model, config: agentConfig(options.config) };
    try {
      await this.client.workflow.start<typeof agentWorkflow>(AGENT_WORKFLOW_TYPE, {
        workflowId: agentWorkflowId(options.agentId),
        taskQueue: this.taskQueue,
        args: [input],
        memo: memoOf(input),
        typedSearchAttributes: searchAttributesOf(input, initialState(input)),
      });
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) throw new FabricError('INVALID_ARGUMENT', `agent ${options.agentId} already exists`);
      throw err;
    }
    return this.agent(options.agentId, capability);
  }

  /** A handle on an existing agent, acting with `capability`. */
  agent(agentId: string, capability: string): AgentHandle {
    return new AgentHandle(this, agentId, capability);
  }

  async status(agentId: string): Promise<AgentStatus> {
    return translated(agentId, () => this.workflow(agentId).query(statusQuery));
  }

  async list(filter: ListFilter = {}): Promise<AgentListing[]> {
    const clauses = [`WorkflowType = '${AGENT_WORKFLOW_TYPE}'`];
    if (!filter.includeClosed) clauses.push(`ExecutionStatus = 'Running'`);
    if (filter.tenant) clauses.push(`${KvTenant.name} = ${quote(filter.tenant)}`);
    if (filter.tier) clauses.push(`${KvTier.name} = ${quote(filter.tier)}`);
    if (filter.phase) clauses.push(`${KvPhase.name} = ${quote(filter.phase)}`);
    const listings: AgentListing[] = [];
    for await (const execution of this.client.workflow.list({ query: clauses.join(' AND ') })) {
      const attributes = execution.typedSearchAttributes;
      listings.push({
        agentId: attributes.get(KvAgentId) ?? execution.workflowId,
        tenant: attributes.get(KvTenant) ?? '',
        ...optional('phase', attributes.get(KvPhase)),
        ...optional('tier', attributes.get(KvTier)),
        ...optional('tokens', attributes.get(KvTokens)),
        ...optional('blocks', attributes.get(KvBlocks)),
        status: execution.status.name,
        workflowId: execution.workflowId,
      });
      if (filter.limit !== undefined && listings.length >= filter.limit) break;
    }
    return listings;
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
  ) {}

  /**
   * A turn: a message to the worker's model (the reply comes back in `reply`), or, for the synthetic
   * engine of tests and benchmarks, a token count.
   */
  turn(input: number | { message: string; generation?: TurnGeneration }, options: CallOptions = {}): Promise<TurnOutcome> {
    const turn = typeof input === 'number' ? { tokens: input } : input;
    return this.update(turnUpdate, { capability: this.capability, ...turn }, options);
  }

  /** Says `message` to the agent and returns the model's reply (greedy unless `generation` says otherwise). */
  async say(message: string, generation?: TurnGeneration, options: CallOptions = {}): Promise<TurnReply> {
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
      throw new FabricError('INVALID_ARGUMENT', 'a fork with a request id needs its child capability, minted once before the first try (mintChildCapability)');
    }
    childCapability ??= this.agents.mintChildCapability(this.capability, childId);
    // A custodian minted again on a retry is as good as the first: same epoch and expiry as the child's token.
    const childCustodian = options.childCustodian ?? this.agents.mintCustodian(childCapability);
    const outcome = await this.update(forkUpdate, { capability: this.capability, childId, childCapability, childCustodian }, options);
    return { child: this.agents.agent(childId, childCapability), status: outcome.child };
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
      throw new FabricError('INVALID_ARGUMENT', 'a renewal with a request id needs its next capability, minted once before the first try (mintCapability)');
    }
    next ??= this.agents.mintRenewal(this.capability);
    const nextCustodian = options.nextCustodian ?? this.agents.mintCustodian(next);
    await this.update(renewUpdate, { capability: this.capability, next, nextCustodian }, options);
    return this.agents.agent(this.agentId, next);
  }

  status(): Promise<AgentStatus> {
    return this.agents.status(this.agentId);
  }

  private update<R, A>(definition: UpdateDefinition<R, [A]>, args: A, { requestId }: CallOptions): Promise<R> {
    const updateId = requestId === undefined ? undefined : updateIdOf(definition.name, requestId);
    return translated(this.agentId, () => this.agents.workflow(this.agentId).executeUpdate(definition, { args: [args], ...(updateId ? { updateId } : {}) }));
  }
}

/** The update id of a caller's request: the update's name keeps one request id from meaning two calls. */
export function updateIdOf(update: string, requestId: string): string {
  if (requestId.length === 0 || requestId.length > 200) throw new FabricError('INVALID_ARGUMENT', 'a request id has 1 to 200 characters');
  return `${update}/${requestId}`;
}

/** Update and query failures as FabricErrors with the code the worker or the workflow chose. */
async function translated<T>(agentId: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure) {
      throw new FabricError(asCode(err.cause.type), err.cause.message);
    }
    // A released agent's workflow has completed; the server answers updates to it with "not found" too.
    if (err instanceof Error && /already completed/i.test(err.message)) throw new FabricError('INVALID_STATE', `agent ${agentId} is released`);
    if (err instanceof WorkflowNotFoundError) throw new FabricError('STALE_HANDLE', `no agent ${agentId}`);
    throw err;
  }
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
