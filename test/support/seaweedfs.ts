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
/**
 * On SIGTERM weed's volume server stops at once and its filer soon after, but its master never exits: past
 * this grace it is killed. It was 10 s, every one of them spent waiting on the master.
 */
const STOP_GRACE_MS = 3_000;
/** First starts tried, each on other ports, while a port weed was given turns out taken. */
const START_ATTEMPTS = 3;

async function freePorts(): Promise<Map<string, number>> {
  const ports = new Map<string, number>();
  for (const flag of PORT_FLAGS) ports.set(flag, await freePort());
  return ports;
}

export interface SeaweedfsServer {
  readonly endpoint: string;
  readonly bucket: string;
  readonly credentials: { accessKeyId: string; secretAccessKey: string };
  /** A store on this server's bucket; `options` adds to or overrides the defaults. */
  store(options?: Partial<S3BlobStoreOptions>): S3BlobStore;
  /** Stops the server (SIGTERM, then SIGKILL after STOP_GRACE_MS); its data stays. */
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
  /** The server's command line on `ports`, one free port per PORT_FLAGS entry. */
  const argsOn = (ports: ReadonlyMap<string, number>) => [
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
    // Its one master, restarted on its own raft state, waits this long to elect itself (the default is 10 s).
    '-master.electionTimeout=1s',
  ];
  /** Chosen again only when a first start finds one of them taken. */
  let ports = await freePorts();
  const endpoint = () => `http://127.0.0.1:${ports.get('s3.port')}`;
  const bucket = `kvf-${randomBytes(4).toString('hex')}`;
  const log = path.join(root, 'weed.log');
  let child: ChildProcess | undefined;

  const start = async () => {
    const out = fs.openSync(log, 'a');
    child = spawn(binary, argsOn(ports), { cwd: root, stdio: ['ignore', out, out] });
    fs.closeSync(out);
    const exited = new Promise<number | null>((resolve) => child!.once('exit', (code) => resolve(code)));
    const deadline = Date.now() + START_TIMEOUT_MS;
    const admin = new S3Client({ endpoint: endpoint(), region: 'us-east-1', forcePathStyle: true, credentials, maxAttempts: 1 });
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

  /** Stops the server with `signal`, then SIGKILL after STOP_GRACE_MS. */
  const stopWith = async (signal: NodeJS.Signals) => {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
    running.kill(signal);
    const killer = setTimeout(() => running.kill('SIGKILL'), STOP_GRACE_MS);
    await exited;
    clearTimeout(killer);
  };

  // The first start: a port chosen free may be taken before weed binds it (by another process, or by one of
  // weed's own outgoing connections), and weed exits; then again on other ports, from an empty directory.
  // A start again after stop() keeps its ports: the stores know the endpoint.
  for (let attempt = 1; ; attempt++) {
    const logged = fs.existsSync(log) ? fs.statSync(log).size : 0;
    try {
      await start();
      break;
    } catch (err) {
      const said = fs.readFileSync(log, 'utf8').slice(logged);
      if (attempt === START_ATTEMPTS || !said.includes('address already in use')) throw err;
      await stopWith('SIGKILL');
      fs.rmSync(data, { recursive: true, force: true });
      fs.mkdirSync(data);
      ports = await freePorts();
    }
  }
  return {
    endpoint: endpoint(),
    bucket,
    credentials,
    store: (options = {}) =>
      new S3BlobStore({
        bucket,
        endpoint: endpoint(),
        region: 'us-east-1',
        forcePathStyle: true,
        credentials,
        maxAttempts: 2,
        requestTimeoutMs: 10_000,
        ...options,
      }),
    stop: () => stopWith('SIGTERM'),
    start,
    // Killed at once: its data goes with it, and weed's master never exits on SIGTERM.
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
