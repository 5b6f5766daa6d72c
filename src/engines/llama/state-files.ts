// A context crossing the llama engine's seam as a llama.cpp sequence-state file (GGSQ, ./sequence-state.ts).
// In: the allocator lays the file out natively from the pages into the engine's memory file (a memfd), and
// llama.cpp loads it only once the file's length is right, because it trusts the file (a foreign state
// loaded with acceptRisk can crash the process); one load uses the memory file at a time. Out (a save,
// after a turn has answered): the sequence is saved to the state directory (tmpfs where there is one) and
// only the rows past the pages are cut from it.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { LlamaContext, LlamaContextSequence } from 'node-llama-cpp';

import { FabricError } from '../../fabric/errors';
import { createMemoryFile } from '../../fabric/memory-file';
import type { MemoryFile, PlaneMajorPiece } from '../../fabric/types';
import { KeyedMutex } from '../../tiers/keyed-mutex';
import type { ContextKv, StoredContext } from '../engine';
import { sameTokens } from '../shared-prefix';
import { bytesPerToken, readSequenceStateFile, sequenceStatePieces, type SequenceStateShape } from './sequence-state';

/** The staging queue's one key: the memory file, written then read by llama.cpp, one load at a time. */
const STATE_FILE = 'state-file';

export class SequenceStateFiles {
  /** Where stored contexts are laid out for llama.cpp to load. */
  private readonly memoryFile: MemoryFile = createMemoryFile('kvfabric-sequence-state');
  private readonly staging = new KeyedMutex();
  private readonly tokenBytes: number;

  constructor(
    private readonly shape: SequenceStateShape,
    private readonly layout: {
      /** V rows transposed (flash attention off). */
      vTransposed: boolean;
      /** The llama context's KV streams (one per sequence unless its cache is unified): rebuilt states repeat it. */
      streams: number;
      /** Where saved states pass through. */
      stateDir: string;
    },
  ) {
    this.tokenBytes = bytesPerToken(shape);
  }

  /** The stored pages of `tokens` into `sequence`: laid out natively into the memory file, then loaded. */
  async load(sequence: LlamaContextSequence, tokens: Uint32Array, context: StoredContext): Promise<void> {
    const pieces = sequenceStatePieces(tokens, this.shape, {
      vTransposed: this.layout.vTransposed,
      streams: this.layout.streams,
      stream: 0,
      seqId: 0,
    });
    const expectedLength = fileLength(pieces, tokens.length, this.tokenBytes / (2 * this.shape.layers));
    await this.staging.run(STATE_FILE, async () => {
      const length = await context.writeKv(this.memoryFile, pieces);
      // Rows of another size would make another file: llama.cpp must not be handed it.
      if (length !== expectedLength) {
        throw new FabricError(
          'INTEGRITY',
          `stored context wrote a ${length}-byte state for ${tokens.length} tokens of ${this.tokenBytes} bytes; expected ${expectedLength}`,
        );
      }
      await sequence.loadStateFromFile(this.memoryFile.path, { acceptRisk: true }).catch((err: unknown) => {
        throw new FabricError('INTEGRITY', `llama.cpp refused the rebuilt state: ${(err as Error).message}`);
      });
    });
  }

  /** Saves the sequence and reads back only the token ids and rows from `from` on. */
  async save(sequence: LlamaContextSequence, from: number): Promise<ContextKv> {
    const statePath = statePathIn(this.layout.stateDir);
    try {
      await sequence.saveStateToFile(statePath);
      const state = readSequenceStateFile(statePath, this.shape, from);
      if (!sameTokens(state.tokens, sequence.contextTokens)) {
        throw new FabricError('INVALID_STATE', "the saved sequence does not hold the sequence's tokens");
      }
      return { tokens: state.tokens.slice(from), kv: state.kv };
    } finally {
      await fs.promises.rm(statePath, { force: true });
    }
  }

  /** Closes the memory file once the load using it, if any, is done. */
  close(): Promise<void> {
    return this.staging.run(STATE_FILE, async () => this.memoryFile.close());
  }
}

/** Saves an empty sequence once: its header says how many streams this context's states carry. */
export async function streamCount(context: LlamaContext, stateDir: string): Promise<number> {
  const sequence = context.getSequence();
  const statePath = statePathIn(stateDir);
  try {
    await sequence.saveStateToFile(statePath);
    const file = await fs.promises.readFile(statePath);
    return new DataView(file.buffer, file.byteOffset, file.byteLength).getUint32(12, true);
  } finally {
    await sequence.dispose();
    await fs.promises.rm(statePath, { force: true });
  }
}

/** /dev/shm (tmpfs) when writable, else the OS temp directory. */
export function defaultStateDir(): string {
  try {
    fs.accessSync('/dev/shm', fs.constants.W_OK);
    return '/dev/shm';
  } catch {
    return os.tmpdir();
  }
}

/** A fresh name for one saved state in `stateDir`. */
function statePathIn(stateDir: string): string {
  return path.join(stateDir, `kvfabric-${process.pid}-${randomUUID()}.ggsq`);
}

/** The length of the file `pieces` lay out for `tokens` tokens: their literal bytes and every plane's rows. */
function fileLength(pieces: readonly PlaneMajorPiece[], tokens: number, rowBytes: number): number {
  return pieces.reduce((sum, piece) => sum + ('bytes' in piece ? piece.bytes.byteLength : tokens * rowBytes), 0);
}
