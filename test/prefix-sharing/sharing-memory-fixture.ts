// A model worker's AgentMemory (the real SmolLM2, pool and tiers) that shares prefixes within a tenant,
// at the batch settings that make whole and continued evaluations identical (one thread, 32 tokens a
// pass: docs/ai-sdk.md#identical-replies), with each first turn's figures kept per context.
import type { MemoryObserver } from '../../src/agent-memory/agent-memory';
import type { TurnResult } from '../../src/agent-memory/operation-results';
import { TenantSalts } from '../../src/prefix-sharing/prefix-keys';
import { KeyRing } from '../../src/tiers/cold';
import { openModelMemory, type ModelMemoryFixture } from '../security/model-memory-fixture';

/** A system-prompt-like text of more than two blocks that agents of a tenant start their first message with. */
export const SHARED =
  'You review pull requests for a storage engine written in C++. Answer in one short sentence, name the file ' +
  'you would change first, and never invent function names that the diff does not show. The question follows.';

/** What a first turn that could share took from a holder, and what the model evaluated. */
export type Prefill = { sharedTokens: number; evaluatedTokens: number };

export interface SharingMemory extends ModelMemoryFixture {
  prefills: Map<string, Prefill>;
  /** Allocates `agentId` of `tenant`, runs its first turn (`turnMs`: the turn's call alone) and waits for its write-behind. */
  firstTurn(
    agentId: string,
    tenant: string,
    message: string,
    sharing?: 'tenant' | 'none',
  ): Promise<{ token: string; result: TurnResult; turnMs: number }>;
  release(agentId: string, tenant: string, token: string): Promise<void>;
  /** The first turn's prompt tokens of a message. */
  promptOf(message: string): Uint32Array;
}

/** The defaults are the tests': short prompts, a few agents, 12 reply tokens a first turn. */
export interface SharingMemoryOptions {
  contextLength?: number;
  blockCount?: number;
  hotContexts?: number;
  maxTokens?: number;
  /** How long a prefix nothing refers to stays; default 0: freed with its last reference. */
  prefixIdleMs?: number;
  /** Another worker's tier directory to share (its cold tier and records). */
  tierDir?: string;
  /** Background work that failed (a cold prefix refused). */
  onBackgroundError?: (what: string, err: unknown) => void;
}

export async function openSharingMemory(name: string, options: SharingMemoryOptions = {}): Promise<SharingMemory> {
  const { contextLength = 512, blockCount = 256, hotContexts = 8, maxTokens = 12, prefixIdleMs = 0, tierDir, onBackgroundError } = options;
  const prefills = new Map<string, Prefill>();
  const observer: MemoryObserver = {
    transferred: () => undefined,
    denied: () => undefined,
    evicted: () => undefined,
    checkpointSkipped: () => undefined,
    quotaRefused: () => undefined,
    firstTurnPrefill: (contextId, figures) => prefills.set(contextId, figures),
  };
  const prefixSalts = new TenantSalts(new KeyRing([{ id: 'w', key: Buffer.alloc(32, 9) }], 'w'));
  const opened = await openModelMemory(
    name,
    { contextLength, hotContexts, threads: 1, batchSize: 32 },
    { prefixSalts, observer, blockCount, prefixIdleMs, ...(onBackgroundError ? { onBackgroundError } : {}) },
    tierDir,
  );
  const { fx } = opened;
  return {
    ...opened,
    prefills,
    async firstTurn(agentId, tenant, message, sharing) {
      const token = fx.token(agentId, tenant);
      await fx.allocate(agentId, token, { tenant });
      const started = performance.now();
      const result = await opened.say(agentId, token, message, { tenant, maxTokens, ...(sharing ? { sharing } : {}) });
      const turnMs = performance.now() - started;
      await fx.memory.settled();
      return { token, result, turnMs };
    },
    async release(agentId, tenant, token) {
      await fx.memory.release(fx.call(agentId, tenant, 'release', token));
    },
    promptOf: (message) => opened.engine.renderConversation([{ role: 'user', content: message }]),
  };
}
