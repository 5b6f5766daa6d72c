// A payload codec key that one side holds and the other does not, told to the caller as what it is.
// A client and its workers must hold the same codec keys (docs/security.md); when they do not, the SDK
// shows only riddles: a worker refuses the client's payloads (refused-payloads.ts puts
// `kvfabric-refused <CODE> (<why>)` in their place, so they fail to convert), its failure is sealed with a
// key the client lacks, and an agent whose input no worker can read fails its workflow task again and
// again ("Workflow Task in failed state"). This file finds the refusal in an error or in an agent's
// history and makes it one FabricError (PERMISSION_DENIED, the codec's own code for a key it does not
// hold) naming the key id; never a key's bytes.
import type { Client } from '@temporalio/client';
import type { ProtoFailure } from '@temporalio/common';
import { decodeOptionalFailureToOptionalError } from '@temporalio/common/lib/internal-non-workflow';

import { ERROR_CODES, FabricError, type ErrorCode } from '../fabric/errors';
import { sealedKeyIdOf } from '../security/payload-codec';
import { printable, QUOTED_ID, quotedId, unquoteId } from '../identity/printable-id';
import { REFUSED_ENCODING_PREFIX } from '../security/refused-payloads';
import { messageChain } from './error-chain';

export interface Refusal {
  code: ErrorCode;
  /** The codec's words, e.g. `payload sealed with key 'k1', which this process does not hold`. */
  reason: string;
  /** The key id the refusal names, when it names one. */
  keyId?: string;
}

const REFUSAL = new RegExp(`${REFUSED_ENCODING_PREFIX} ([A-Z_]+) \\((.*)\\)`, 's');
/** The codec prints the key id quoted and escaped (quotedId): a quote in a forged id cannot end it early. */
const KEY_ID = new RegExp(`key ${QUOTED_ID.source}`);

/** The workers' side and the client's side of one mismatch. */
export type RefusedBy = 'worker' | 'client';

/** The refusal an error (or any error in its chain of causes) carries, if any. */
export function refusalIn(err: unknown): Refusal | undefined {
  for (const message of messageChain(err)) {
    const found = REFUSAL.exec(message);
    if (!found) continue;
    const code = (ERROR_CODES as readonly string[]).includes(found[1]!) ? (found[1] as ErrorCode) : 'PERMISSION_DENIED';
    const reason = found[2]!;
    const printed = KEY_ID.exec(reason)?.[1];
    const keyId = printed === undefined ? undefined : unquoteId(printed);
    return { code, reason, ...(keyId === undefined ? {} : { keyId }) };
  }
  return undefined;
}

/**
 * The caller's error for a refusal: `worker` when a worker could not read what this client sent (the
 * client read the worker's answer), `client` when this client cannot read what the workers wrote.
 */
export function mismatchError(agentId: string, refusal: Refusal, by: RefusedBy, clientKeyId?: string): FabricError {
  const fix =
    'give clients and workers the same payload codec keys ' +
    '(KVFABRIC_CODEC_KEYS or KVFABRIC_CODEC_KEYS_FILE, e.g. the codec.keys of one `kvfabric keygen`)';
  // The ids and the reason came from outside (a payload's header, a worker's failure): printed escaped.
  if (refusal.keyId === undefined)
    return new FabricError(refusal.code, `agent ${agentId}: a payload was refused (${printable(refusal.reason)}): ${fix}`);
  const keyId = quotedId(refusal.keyId);
  const what =
    by === 'worker'
      ? `its worker cannot read this client's payloads: they are sealed with payload codec key ${keyId}, which the worker does not hold`
      : `this client cannot read its workers' payloads: they are sealed with payload codec key ${keyId}, which this client does not hold` +
        (clientKeyId && clientKeyId !== refusal.keyId ? ` (this client sealed the agent's input with ${quotedId(clientKeyId)})` : '');
  return new FabricError(refusal.code, `agent ${agentId}: ${what}: ${fix}`);
}

/** How an agent's workflow stands after its first workflow task: run, refused by the codec, or not yet known. */
export type FirstTask =
  | { outcome: 'completed' }
  | { outcome: 'pending' }
  /** `inputKeyId`: the codec key id the agent's input was sealed with (the sealed header, never decrypted here). */
  | { outcome: 'refused'; refusal: Refusal; by: RefusedBy; inputKeyId?: string }
  | { outcome: 'failed' };

/**
 * Reads a run's history (raw: nothing is decoded but a workflow task's failure) for its first workflow
 * task's outcome. A run whose first task completed has run; one whose first task failed because a
 * codec refused a payload has done nothing: no worker could read its input.
 */
export async function firstWorkflowTask(client: Client, workflowId: string, runId?: string): Promise<FirstTask> {
  const { history } = await client.workflowService.getWorkflowExecutionHistory({
    namespace: client.options.namespace,
    execution: { workflowId, ...(runId ? { runId } : {}) },
    maximumPageSize: 100,
  });
  let inputKeyId: string | undefined;
  for (const event of history?.events ?? []) {
    const input = event.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
    if (input) inputKeyId = sealedKeyIdOf(input)?.slice(0, 64);
    if (event.workflowTaskCompletedEventAttributes) return { outcome: 'completed' };
    const failed = event.workflowTaskFailedEventAttributes;
    if (failed) {
      const read = await readFailure(client, failed.failure);
      return read ? { outcome: 'refused', ...read, ...(inputKeyId === undefined ? {} : { inputKeyId }) } : { outcome: 'failed' };
    }
  }
  return { outcome: 'pending' };
}

/** A workflow task's failure, decoded with this client's codec: the worker's refusal, or this client's own. */
async function readFailure(
  client: Client,
  failure: ProtoFailure | null | undefined,
): Promise<{ refusal: Refusal; by: RefusedBy } | undefined> {
  let error: Error | undefined;
  try {
    error = await decodeOptionalFailureToOptionalError(client.options.loadedDataConverter, failure);
  } catch (err) {
    // The failure's sealed attributes did not open here: the workers seal with a key this client lacks.
    const refusal = refusalIn(err);
    return refusal ? { refusal, by: 'client' } : undefined;
  }
  const refusal = refusalIn(error);
  return refusal ? { refusal, by: 'worker' } : undefined;
}
