// Attack: whoever can put an entry at the audit log's name (the audit folder is owner-only, but a folder
// restored from a backup or a shared mount may hold anything) plants a symlink to a file of the worker's
// user, or a FIFO. The worker's next denial line must not be appended through the link, nor block on the
// FIFO: it is INTEGRITY, and the linked file is unchanged.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { AuditLog } from '../../../src/security/audit-log';

const root = mkdtempSync(join(tmpdir(), 'kvfabric-audit-links-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const denial = { agent: 'a', tenant: 't', context: 'c', action: 'resume', reason: 'not-owner' as const };

function auditFolder(name: string): string {
  const folder = join(root, name, 'audit');
  mkdirSync(folder, { recursive: true, mode: 0o700 });
  return folder;
}

describe('attack: a link or FIFO planted at the audit log', () => {
  it('refuses to append through a symlink, leaving its target as it was', async () => {
    const folder = auditFolder('link');
    const target = join(root, 'victim.txt');
    writeFileSync(target, 'precious\n');
    symlinkSync(target, join(folder, 'denials.jsonl'));
    const refused = await new AuditLog(join(folder, 'denials.jsonl'), 'w').denied(denial).catch((err: unknown) => err);
    expect(refused).toMatchObject({ code: 'INTEGRITY' });
    expect(readFileSync(target, 'utf8')).toBe('precious\n');
  });

  it('refuses a FIFO at once instead of blocking on it', async () => {
    const folder = auditFolder('fifo');
    execFileSync('mkfifo', [join(folder, 'denials.jsonl')]);
    const started = Date.now();
    const refused = await new AuditLog(join(folder, 'denials.jsonl'), 'w').denied(denial).catch((err: unknown) => err);
    expect(refused).toMatchObject({ code: 'INTEGRITY' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('still appends one line per denial to a regular file', async () => {
    const folder = auditFolder('plain');
    const log = new AuditLog(join(folder, 'denials.jsonl'), 'w');
    await log.denied(denial);
    await log.denied(denial);
    const lines = readFileSync(join(folder, 'denials.jsonl'), 'utf8').trim().split('\n');
    expect(lines.map((line) => JSON.parse(line).reason)).toEqual(['not-owner', 'not-owner']);
  });
});
