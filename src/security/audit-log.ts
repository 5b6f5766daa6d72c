// Append-only record of refused accesses: one JSON line per denial with who asked (agent, tenant), for
// what (context, action), why (a stable reason code) and when. Never the token: a refused token may
// still be someone's secret, and the log is read by more people than hold capabilities.
import { dirname } from 'node:path';

import { openPrivateDirectory, PRIVATE_FILE_MODE } from '../blob-store/posix/private-directory';
import { appendToRegularFile } from '../blob-store/posix/regular-file';
import type { DenialReason } from './claims';

export interface Denial {
  agent: string;
  tenant: string;
  context: string;
  action: string;
  reason: DenialReason;
}

export interface AuditSink {
  denied(denial: Denial): Promise<void>;
}

export class AuditLog implements AuditSink {
  private ready: Promise<unknown> | undefined;

  constructor(
    readonly file: string,
    private readonly worker: string,
  ) {}

  /**
   * Opens (or creates) the audit folder. A worker calls it at start, so a folder it must refuse stops the
   * worker there instead of losing every later denial's line.
   */
  open(): Promise<unknown> {
    // Owner-only, like every folder of the tier directory: the lines name agents and tenants.
    this.ready ??= openPrivateDirectory(dirname(this.file), 'the audit directory');
    return this.ready;
  }

  async denied(denial: Denial): Promise<void> {
    await this.open();
    // One write per line with O_APPEND: lines from concurrent denials never interleave. Never through a
    // link or into a FIFO planted at the log's name: the lines go to this file or nowhere.
    const line = { time: new Date().toISOString(), worker: this.worker, ...pick(denial) };
    await appendToRegularFile(this.file, `the audit log ${this.file}`, `${JSON.stringify(line)}\n`, PRIVATE_FILE_MODE);
  }
}

/** Only the listed fields: a caller passing a richer object cannot leak more into the log. */
function pick({ agent, tenant, context, action, reason }: Denial): Denial {
  return {
    agent: String(agent).slice(0, 128),
    tenant: String(tenant).slice(0, 64),
    context: String(context).slice(0, 128),
    action,
    reason,
  };
}
