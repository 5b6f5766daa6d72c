// Stand-in KV bytes for a turn: there is no model here, so a turn's "prefill" is a keystream derived from
// (agent, turn). Deterministic, so a test or an operator can recompute any turn's bytes; AES-CTR, so
// producing hundreds of MiB costs milliseconds, not seconds.
import { createCipheriv, createHash } from 'node:crypto';

export function syntheticKv(agentId: string, turn: number, tokens: number, bytesPerToken: number): Uint8Array {
  const seed = createHash('sha256').update(`kvfabric.synthetic-kv.v1\0${agentId}\0${turn}`).digest();
  const cipher = createCipheriv('aes-128-ctr', seed.subarray(0, 16), seed.subarray(16, 32));
  const zeros = Buffer.alloc(tokens * bytesPerToken);
  return cipher.update(zeros);
}
