// Who an agent is, as every layer names it: the agent id (which also names its context, its workflow,
// its cold-tier files and its metrics), its workflow id, and the tenant name rule. Pure and free of
// Node APIs, so the client, the workflow bundle and the worker all import this one copy.
import { FabricError } from '../fabric/errors';

/** Agent ids name workflows, files and metrics: a conservative alphabet. */
export const AGENT_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
/** Tenant names become file contents and search attributes. */
export const TENANT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

export const AGENT_ID_RULE = "1-128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit";
export const TENANT_NAME_RULE = 'tenant must be 1 to 63 characters: letters, digits, ".", "_" or "-", starting with a letter or digit';

export function isAgentId(value: unknown): value is string {
  return typeof value === 'string' && AGENT_ID.test(value);
}

export function isTenantName(value: unknown): value is string {
  return typeof value === 'string' && TENANT_NAME.test(value);
}

/** One workflow per agent, found by id. */
export function agentWorkflowId(agentId: string): string {
  return `kvagent-${agentId}`;
}

/** The workers' rule for tenant names, checked by clients too before a workflow exists; INVALID_ARGUMENT otherwise. */
export function checkTenantName(tenant: unknown): asserts tenant is string {
  if (!isTenantName(tenant)) throw new FabricError('INVALID_ARGUMENT', TENANT_NAME_RULE);
}
