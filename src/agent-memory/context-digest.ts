// The checksum that lets a workflow verify a context byte-exact without ever holding its bytes: a SHA-256
// chain over fixed chunks of tokens, so an append folds in only the new bytes (plus the partly filled
// last chunk, re-read from the context) instead of rehashing everything, and a restore recomputes it
// from scratch over what came back.
import { createHash } from 'node:crypto';

/** Tokens per chained chunk: independent of the pool's block size, so digests survive re-layouts. */
export const DIGEST_CHUNK_TOKENS = 16;
const DOMAIN = 'kvfabric.context-digest.v1';

/** Carried in workflow state (hex strings, never bytes). */
export interface DigestState {
  /** Chain value over the first `chainedTokens` tokens (whole chunks). */
  chain: string;
  chainedTokens: number;
  /** Digest of the whole context: the chain, the unchained tail and the token count. */
  value: string;
  tokens: number;
}

export function emptyDigest(): DigestState {
  return new ContextDigest(initialChain(), 0, 0).finish();
}

function initialChain(): Buffer {
  return createHash('sha256').update(DOMAIN).digest();
}

/**
 * Builds a DigestState from a starting chain and the token-major bytes that follow it. Bytes may arrive
 * in any slicing; only whole chunks are folded into the chain.
 */
export class ContextDigest {
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

  /** Continues from a carried state; the caller then feeds the tokens from `state.chainedTokens` on. */
  static resume(state: DigestState, bytesPerToken: number): ContextDigest {
    return new ContextDigest(Buffer.from(state.chain, 'hex'), state.chainedTokens, bytesPerToken);
  }

  static fresh(bytesPerToken: number): ContextDigest {
    return new ContextDigest(initialChain(), 0, bytesPerToken);
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

  finish(): DigestState {
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
