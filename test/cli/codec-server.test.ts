// `kvfabric codec-server` as a process, on keys `kvfabric keygen` wrote: it decodes a payload sealed with
// the codec key for a caller with the token (bearer or path), refuses one without, and stops on SIGTERM
// with exit 0. (The server's own protocol and CORS: test/security/payload-codec.test.ts.)
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { keygen } from '../../src/cli/keygen';
import { codecKeyRingFromEnv } from '../../src/client/client-security';
import { freePort } from '../../src/dev-server/dev-server';
import { EncryptionCodec } from '../../src/security/payload-codec';
import { startCli } from './run-cli';

const SECRET = { reply: 'Your name is Ada.' };
const keys = mkdtempSync(join(tmpdir(), 'kvfabric-codec-server-'));
const env = { KVFABRIC_CODEC_KEYS_FILE: join(keys, 'codec.keys'), KVFABRIC_CODEC_SERVER_TOKEN_FILE: join(keys, 'codec-server.token') };

describe('kvfabric codec-server', () => {
  let server: Awaited<ReturnType<typeof startCli>>;
  let url: string;
  let token: string;
  let sealed: Payload;
  beforeAll(async () => {
    keygen(['--out', keys, '--force'], () => undefined);
    token = readFileSync(env.KVFABRIC_CODEC_SERVER_TOKEN_FILE, 'utf8').trim();
    [sealed] = (await new EncryptionCodec(codecKeyRingFromEnv(env)).encode([defaultPayloadConverter.toPayload(SECRET)])) as [Payload];
    const port = await freePort();
    server = await startCli(['codec-server', '--port', String(port), '--ui-origin', 'http://localhost:18233'], env, /listening on (\S+)/);
    url = /listening on (\S+)/.exec(server.output())![1]!;
    expect(url).toBe(`http://127.0.0.1:${port}`);
  });
  afterAll(() => {
    if (server?.child.exitCode === null) server.child.kill('SIGKILL');
    rmSync(keys, { recursive: true, force: true });
  });

  const decode = (path: string, headers: Record<string, string> = {}) =>
    fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Namespace': 'default', ...headers },
      body: JSON.stringify({
        payloads: [
          {
            metadata: Object.fromEntries(Object.entries(sealed.metadata!).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
            data: Buffer.from(sealed.data!).toString('base64'),
          },
        ],
      }),
    });

  it('decodes for the bearer token and for the token as the endpoint path', async () => {
    for (const response of [
      await decode('/decode', { Authorization: `Bearer ${token}`, Origin: 'http://localhost:18233' }),
      await decode(`/${token}/decode`),
    ]) {
      expect(response.status).toBe(200);
      const { payloads } = (await response.json()) as { payloads: Array<{ data: string }> };
      expect(JSON.parse(Buffer.from(payloads[0]!.data, 'base64').toString())).toEqual(SECRET);
    }
  });

  it('refuses a caller without the token, or with another, and shows no plaintext', async () => {
    for (const response of [await decode('/decode'), await decode('/decode', { Authorization: `Bearer ${'x'.repeat(43)}` })]) {
      expect(response.status).toBe(401);
      expect(await response.text()).not.toContain('Ada');
    }
  });

  it('stops on SIGTERM: says so and exits 0', async () => {
    server.child.kill('SIGTERM');
    expect(await server.exited).toBe(0);
    expect(server.output()).toContain('kvfabric codec server stopped (SIGTERM)');
    await expect(fetch(`${url}/decode`, { method: 'POST' })).rejects.toThrow();
  });
});
