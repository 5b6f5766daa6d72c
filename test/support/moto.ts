// A second S3 implementation for the fence race: moto's S3 server (`python3 -m moto.server`, in memory)
// on a free port of 127.0.0.1, with one bucket. Its packages come from scripts/ensure-moto.ts (npm run
// setup:tests installs them); a test that finds them missing fails saying so, never skips.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';

import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';

import { S3BlobStore, type S3BlobStoreOptions } from '../../src/blob-store/s3/s3-blob-store';
import { freePort } from '../../src/dev-server/dev-server';
import { motoPackages } from '../../scripts/ensure-moto';

const START_TIMEOUT_MS = 30_000;

export interface MotoServer {
  /** A store on this server's bucket; `options` adds to or overrides the defaults. */
  store(options?: Partial<S3BlobStoreOptions>): S3BlobStore;
  close(): Promise<void>;
}

export async function startMoto(): Promise<MotoServer> {
  const packages = motoPackages();
  if (!fs.existsSync(packages)) throw new Error(`moto is not installed (${packages}): run npm run setup:tests (scripts/ensure-moto.ts)`);
  const port = await freePort();
  const endpoint = `http://127.0.0.1:${port}`;
  // moto accepts any credentials; the SDK signs with these as it would against AWS.
  const credentials = { accessKeyId: 'kvfabric-tests', secretAccessKey: randomBytes(24).toString('hex') };
  const bucket = `kvf-${randomBytes(4).toString('hex')}`;
  let output = '';
  const child: ChildProcess = spawn('python3', ['-m', 'moto.server', '-H', '127.0.0.1', '-p', String(port)], {
    env: { ...process.env, PYTHONPATH: packages },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-2000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  let spawnFailure: Error | undefined;
  child.once('error', (err) => {
    spawnFailure = err; // python3 missing: no 'exit' follows
  });
  const close = async () => {
    if (spawnFailure || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGKILL');
    await exited;
  };
  const admin = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials, maxAttempts: 1 });
  try {
    for (const deadline = Date.now() + START_TIMEOUT_MS; ; ) {
      if (spawnFailure) throw new Error(`cannot start moto's server with python3: ${spawnFailure.message}`);
      if (child.exitCode !== null) throw new Error(`moto's server exited (${child.exitCode}) while starting: ${output}`);
      try {
        await admin.send(new CreateBucketCommand({ Bucket: bucket }));
        break;
      } catch (err) {
        if (Date.now() > deadline)
          throw new Error(`moto's server did not serve S3 within ${START_TIMEOUT_MS} ms (${(err as Error).name}): ${output}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  } catch (err) {
    await close();
    throw err;
  } finally {
    admin.destroy();
  }
  return {
    store: (options = {}) => new S3BlobStore({ bucket, endpoint, region: 'us-east-1', forcePathStyle: true, credentials, ...options }),
    close,
  };
}
