// The digest workflows carried before page checksums (context-digest.ts): a SHA-256 chain over fixed
// chunks of tokens, recomputed over every byte a restore brought back. Kept so agents started before
// it still verify (once, the old way) and from then on carry the new digest.
import { createHash } from 'node:crypto';

import type { DigestState } from './context-digest';

/** Tokens per chained chunk: independent of the pool's block size, so digests survive re-layouts. */
const DIGEST_CHUNK_TOKENS = 16;
const DOMAIN = 'kvfabric.context-digest.v1';

/** A legacy digest: one with a chain and no scheme. */
export interface ChainDigestState extends DigestState {
  chain: string;
  chainedTokens: number;
}

export function isChainDigest(state: DigestState): state is ChainDigestState {
  return state.scheme === undefined && typeof state.chain === 'string' && typeof state.chainedTokens === 'number';
}

function initialChain(): Buffer {
  return createHash('sha256').update(DOMAIN).digest();
}

/** Builds a chain digest over token-major bytes fed from the first token on, in any slicing. */
export class ChainDigest {
  private chain: Buffer;
  private chainedTokens: number;
  private readonly pending: Buffer[] = [];
  private pendingBytes = 0;
  private readonly chunkBytes: number;

  constructor(
    chain: Buffer,
    chainedTokens: number,
    private readonly bytesPerToken: number,
  ) {
    this.chain = chain;
    this.chainedTokens = chainedTokens;
    this.chunkBytes = DIGEST_CHUNK_TOKENS * bytesPerToken;
  }

  static fresh(bytesPerToken: number): ChainDigest {
    return new ChainDigest(initialChain(), 0, bytesPerToken);
  }

  update(bytes: Uint8Array): this {
    let view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    while (view.length > 0) {
      const take = Math.min(view.length, this.chunkBytes - this.pendingBytes);
      this.pending.push(view.subarray(0, take));
      this.pendingBytes += take;
      view = view.subarray(take);
      if (this.pendingBytes === this.chunkBytes) this.fold();
    }
    return this;
  }

  finish(): ChainDigestState {
    const tailTokens = this.bytesPerToken === 0 ? 0 : this.pendingBytes / this.bytesPerToken;
    const tokens = this.chainedTokens + tailTokens;
    const count = Buffer.alloc(8);
    count.writeBigUInt64BE(BigInt(tokens));
    const value = createHash('sha256').update(this.chain).update(Buffer.concat(this.pending)).update(count).digest('hex');
    return { chain: this.chain.toString('hex'), chainedTokens: this.chainedTokens, value, tokens };
  }

  private fold(): void {
    const hash = createHash('sha256').update(this.chain);
    for (const part of this.pending) hash.update(part);
    this.chain = hash.digest();
    this.chainedTokens += DIGEST_CHUNK_TOKENS;
    this.pending.length = 0;
    this.pendingBytes = 0;
  }
}
