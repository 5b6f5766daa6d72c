// docs/engines.md, "Adding an engine", as written: an engine defined in this file alone, registered by
// name, runs a conversation through the worker plugin on a real dev server. Its turns answer, its KV
// reaches the pages (the write-behind) and a suspend to disk and resume bring the context back into it:
// nothing outside this file and its registration knows it is there.
import { afterAll, beforeAll, expect, it } from 'vitest';

import type {
  ChatMessage,
  ContextKv,
  Engine,
  EngineCompletionRequest,
  EngineCompletionResult,
  EngineSettings,
  EngineTurnRequest,
  EngineTurnResult,
  StoredContext,
} from '../../src/engines/engine';
import { requireCompatible } from '../../src/engines/fingerprint';
import { engineNamed, engineNames, registerEngine } from '../../src/engines/registry';
import { bytesPerTokenOf } from '../../src/fabric/layout';
import { TEST_AGENT_CONFIG, TINY, startCluster, type TestCluster } from '../temporal/harness';

/** Replies with the message upper-cased; a token is a character code, its KV the code repeated. */
class ShoutingEngine implements Engine {
  readonly needs = { hostPool: false };
  readonly fingerprint;
  /** What each key's hot copy holds, and every context load it was asked for. */
  readonly hot = new Map<string, Uint32Array>();
  readonly loads: string[] = [];

  constructor(settings: EngineSettings) {
    const shape = settings.model!.shape;
    this.fingerprint = {
      engine: 'shouting',
      version: '1',
      modelSha256: '',
      flashAttention: false,
      kType: 'f16',
      vType: 'f16',
      shape,
      contextLength: settings.contextLength,
    };
  }

  async turn({ key, context, input }: EngineTurnRequest): Promise<EngineTurnResult> {
    if (context.tokens.length > 0) requireCompatible(context.fingerprint!, this.fingerprint);
    const reply = input.toUpperCase();
    const added = Uint32Array.from([...input, ...reply], (char) => char.codePointAt(0)!);
    const hot = this.hot.get(key);
    const resumedFrom = context.tokens.length === 0 ? 'empty' : hot && hot.join() === context.tokens.join() ? 'hot' : 'stored';
    this.hot.set(key, Uint32Array.from([...context.tokens, ...added]));
    return { reply, promptTokens: input.length, replyTokens: reply.length, added, resumedFrom };
  }

  renderConversation(messages: readonly ChatMessage[]): Uint32Array {
    return Uint32Array.from(
      messages.flatMap((m) => (typeof m.content === 'string' ? [...m.content].map((c) => c.codePointAt(0)!) : [...m.content])),
    );
  }

  /** The whole prompt upper-cased: a first turn taken as a completion (prefix sharing) answers as turn() does. */
  async complete({ key, context, prompt }: EngineCompletionRequest): Promise<EngineCompletionResult> {
    const text = String.fromCodePoint(...prompt).toUpperCase();
    const reply = Uint32Array.from(text, (char) => char.codePointAt(0)!);
    const tokens = Uint32Array.from([...prompt, ...reply]);
    this.hot.set(key, tokens);
    return {
      text,
      reply,
      reusedTokens: context.tokens.length,
      evaluatedTokens: prompt.length - context.tokens.length,
      finish: 'stop',
      tokens,
      resumedFrom: context.tokens.length === 0 ? 'empty' : 'stored',
    };
  }

  async load(key: string, context: StoredContext): Promise<EngineTurnResult['resumedFrom']> {
    this.loads.push(key);
    this.hot.set(key, context.tokens.slice());
    return 'stored';
  }

  async save(key: string, fromToken: number): Promise<ContextKv> {
    const tokens = this.hot.get(key)!.slice(fromToken);
    const bytesPerToken = bytesPerTokenOf(this.fingerprint.shape);
    const kv = new Uint8Array(tokens.length * bytesPerToken);
    tokens.forEach((id, i) => kv.fill(id & 0xff, i * bytesPerToken, (i + 1) * bytesPerToken));
    return { tokens, kv };
  }

  async release(key: string): Promise<void> {
    this.hot.delete(key);
  }

  async close(): Promise<void> {}
}

let cluster: TestCluster;
let engine: ShoutingEngine | undefined;

beforeAll(async () => {
  registerEngine('shouting', async (settings) => {
    engine = new ShoutingEngine(settings);
    return engine;
  });
  cluster = await startCluster();
  await cluster.startWorker({ config: { engine: { name: 'shouting', model: TINY } } });
});

afterAll(async () => {
  await cluster?.close();
});

it('is chosen by name, and a name nobody registered is refused naming those that are', async () => {
  expect(engineNames()).toEqual(['llama', 'synthetic', 'shouting']);
  expect(() => engineNamed('nonesuch')).toThrow(/--engine must be one of llama, synthetic, shouting, got 'nonesuch'/);
  expect(() => registerEngine('shouting', async () => engine!)).toThrow(/registered already/);
});

it('runs an agent through the plugin: turns, its KV in the pages, and a resume from disk back into it', async () => {
  const agent = await cluster.agents.start({ agentId: 'shouter', tenant: 'acme', model: TINY, config: TEST_AGENT_CONFIG });
  expect(await agent.say('hello')).toEqual({ reply: 'HELLO', promptTokens: 5, replyTokens: 5 });
  expect(await agent.say('again')).toMatchObject({ reply: 'AGAIN' });
  expect(engine!.hot.get('shouter')).toHaveLength(20);

  await agent.suspend('disk');
  expect(engine!.hot.has('shouter')).toBe(false); // the context left the engine with its pages
  const resumed = await agent.resume();
  expect(resumed).toMatchObject({ tier: 'device', tokens: 20 });
  expect(engine!.loads).toContain('shouter');
  expect(await agent.say('still here?')).toMatchObject({ reply: 'STILL HERE?' });
  expect(await agent.status()).toMatchObject({ tokens: 42, turns: 3 });
});
