// Checks a context's bytes against the digest its workflow recorded (context-digest.ts), from the page
// checksums the tier layer keeps: the moves that brought pages back checked each against its checksum,
// so comparing the checksums in order with the record re-reads at most one page (a prefix that ends
// inside a page).
import { crc32c } from '../fabric/checksum';
import { FabricError } from '../fabric/errors';
import type { TieredMemory } from '../tiers/tiered-memory';
import { pageDigest, type DigestState } from './context-digest';

export class ContextVerifier {
  constructor(
    private readonly tiers: Pick<TieredMemory, 'pageChecksums' | 'contextStats' | 'read'>,
    private readonly tokensPerBlock: number,
  ) {}

  /** The digest of the context's first `tokens` tokens. */
  async digestAt(contextId: string, tokens: number): Promise<DigestState> {
    const { tokensPerBlock } = this;
    const sums = Array.from(this.tiers.pageChecksums(contextId).subarray(0, Math.ceil(tokens / tokensPerBlock)));
    const inPage = tokens % tokensPerBlock;
    // The last page holds more than the prefix's share of it: sum just that share.
    if (inPage !== 0 && this.tiers.contextStats(contextId).tokens > tokens) {
      sums[sums.length - 1] = crc32c(await this.tiers.read(contextId, tokens - inPage, inPage));
    }
    return pageDigest(sums, tokens, tokensPerBlock);
  }

  /** Whether the context's first `recorded.tokens` tokens are the ones the digest was taken of. */
  async matches(contextId: string, recorded: DigestState): Promise<boolean> {
    if (this.tiers.contextStats(contextId).tokens < recorded.tokens) return false;
    return (await this.digestAt(contextId, recorded.tokens)).value === recorded.value;
  }

  /**
   * The digest of the whole context, once its first `expected.tokens` tokens are found to have the
   * digest the workflow recorded; INTEGRITY otherwise (fewer tokens, other pages or another order).
   */
  async verify(contextId: string, expected: DigestState): Promise<DigestState> {
    const total = this.tiers.contextStats(contextId).tokens;
    if (total < expected.tokens) {
      throw new FabricError('INTEGRITY', `context ${contextId} came back with ${total} tokens; the workflow recorded ${expected.tokens}`);
    }
    if (!(await this.matches(contextId, expected))) {
      throw new FabricError('INTEGRITY', `context ${contextId}: the resumed pages do not match the digest its workflow recorded`);
    }
    return this.digestAt(contextId, total);
  }
}
