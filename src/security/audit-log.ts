// Append-only record of refused accesses: one JSON line per denial with who asked (agent, tenant), for
// what (context, action), why (a stable reason code) and when. Never the token: a refused token may
// still be someone's secret, and the log is read by more people than hold capabilities.
import { appendFile, mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';

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

  async denied(denial: Denial): Promise<void> {
    this.ready ??= mkdir(dirname(this.file), { recursive: true });
    await this.ready;
    // One write per line with O_APPEND: lines from concurrent denials never interleave.
    const line = { time: new Date().toISOString(), worker: this.worker, ...pick(denial) };
    await appendFile(this.file, `${JSON.stringify(line)}\n`, { mode: 0o600 });
  }
}

/** Only the listed fields: a caller passing a richer object cannot leak more into the log. */
function pick({ agent, tenant, context, action, reason }: Denial): Denial {
  return { agent: String(agent).slice(0, 128), tenant: String(tenant).slice(0, 64), context: String(context).slice(0, 128), action, reason };
}
