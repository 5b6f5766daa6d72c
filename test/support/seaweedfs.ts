// A real S3 server for the blob store's S3 tests: SeaweedFS's `weed server` (master, volume server, filer
// and S3 gateway in one process) on free ports of 127.0.0.1, its data in a temp folder, with one S3
// identity so the SDK signs its requests as it would against AWS, and one bucket. The binary comes from
// scripts/ensure-seaweedfs.ts (npm run setup:tests builds it); a test that finds it missing fails
// saying so: an S3 test never skips. stop() and start() again keep the data and the ports, for tests
// of a store that goes down.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';

import { S3BlobStore, type S3BlobStoreOptions } from '../../src/blob-store/s3/s3-blob-store';
import { freePort } from '../../src/dev-server/dev-server';
import { seaweedfsBinary } from '../../scripts/ensure-seaweedfs';

/** weed server's port flags; gRPC's default (HTTP port + 10000) could land past 65535 or on a taken port. */
const PORT_FLAGS = [
  'master.port',
  'master.port.grpc',
  'volume.port',
  'volume.port.grpc',
  'filer.port',
  'filer.port.grpc',
  's3.port',
  's3.port.grpc',
];
const START_TIMEOUT_MS = 60_000;

export interface SeaweedfsServer {
  readonly endpoint: string;
  readonly bucket: string;
  readonly credentials: { accessKeyId: string; secretAccessKey: string };
  /** A store on this server's bucket; `options` adds to or overrides the defaults. */
  store(options?: Partial<S3BlobStoreOptions>): S3BlobStore;
  /** Stops the server (SIGTERM, then SIGKILL after 10 s); its data stays. */
  stop(): Promise<void>;
  /** Starts it again on the same ports and data. */
  start(): Promise<void>;
  /** Stops it and removes its data. */
  close(): Promise<void>;
}

export async function startSeaweedfs(): Promise<SeaweedfsServer> {
  const binary = seaweedfsBinary();
  if (!fs.existsSync(binary)) {
    throw new Error(`SeaweedFS is not built (${binary}): run npm run setup:tests (scripts/ensure-seaweedfs.ts builds it with Go)`);
  }
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-seaweedfs-'));
  const data = path.join(root, 'data');
  fs.mkdirSync(data);
  const credentials = { accessKeyId: `kvf${randomBytes(8).toString('hex')}`, secretAccessKey: randomBytes(24).toString('hex') };
  const identities = {
    identities: [
      {
        name: 'kvfabric-tests',
        credentials: [{ accessKey: credentials.accessKeyId, secretKey: credentials.secretAccessKey }],
        actions: ['Admin', 'Read', 'Write', 'List', 'Tagging'],
      },
    ],
  };
  const config = path.join(root, 's3.json');
  fs.writeFileSync(config, JSON.stringify(identities), { mode: 0o600 });
  const ports = new Map<string, number>();
  for (const flag of PORT_FLAGS) ports.set(flag, await freePort());
  const args = [
    'server',
    `-dir=${data}`,
    '-ip=127.0.0.1',
    '-ip.bind=127.0.0.1',
    ...PORT_FLAGS.map((flag) => `-${flag}=${ports.get(flag)}`),
    '-filer',
    '-s3',
    `-s3.config=${config}`,
    '-s3.port.iceberg=0',
    '-s3.port.lance=0',
    '-master.telemetry=false',
    // Small volumes: the default preallocates far more than a test writes.
    '-master.volumeSizeLimitMB=64',
    // Stopped at once (the default waits 10 s for clients to notice): the tests stop and start it.
    '-volume.preStopSeconds=0',
  ];
  const endpoint = `http://127.0.0.1:${ports.get('s3.port')}`;
  const bucket = `kvf-${randomBytes(4).toString('hex')}`;
  const log = path.join(root, 'weed.log');
  let child: ChildProcess | undefined;

  const start = async () => {
    const out = fs.openSync(log, 'a');
    child = spawn(binary, args, { cwd: root, stdio: ['ignore', out, out] });
    fs.closeSync(out);
    const exited = new Promise<number | null>((resolve) => child!.once('exit', (code) => resolve(code)));
    const deadline = Date.now() + START_TIMEOUT_MS;
    const admin = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials, maxAttempts: 1 });
    try {
      for (;;) {
        const early = await Promise.race([exited, new Promise<'running'>((resolve) => setTimeout(() => resolve('running'), 250))]);
        if (early !== 'running') throw new Error(`weed server exited (${early}) while starting: ${tail(log)}`);
        try {
          await admin.send(new CreateBucketCommand({ Bucket: bucket }));
          return;
        } catch (err) {
          const name = (err as { name?: string }).name;
          if (name === 'BucketAlreadyOwnedByYou' || name === 'BucketAlreadyExists') return;
          if (Date.now() > deadline) throw new Error(`weed server did not serve S3 within ${START_TIMEOUT_MS} ms (${name}): ${tail(log)}`);
        }
      }
    } finally {
      admin.destroy();
    }
  };

  /** Stops the server with `signal`, then SIGKILL after 10 s. */
  const stopWith = async (signal: NodeJS.Signals) => {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
    running.kill(signal);
    const killer = setTimeout(() => running.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(killer);
  };

  await start();
  return {
    endpoint,
    bucket,
    credentials,
    store: (options = {}) =>
      new S3BlobStore({
        bucket,
        endpoint,
        region: 'us-east-1',
        forcePathStyle: true,
        credentials,
        maxAttempts: 2,
        requestTimeoutMs: 10_000,
        ...options,
      }),
    stop: () => stopWith('SIGTERM'),
    start,
    // Killed at once: its data goes with it, and weed takes the whole 10 s to exit on SIGTERM.
    close: async () => {
      await stopWith('SIGKILL');
      fs.rmSync(root, { recursive: true, force: true });
    },
  };
}

function tail(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8').slice(-2000);
  } catch {
    return '(no log)';
  }
}
