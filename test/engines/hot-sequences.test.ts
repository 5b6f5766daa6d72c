// The llama engine's hot copies, on a real llama context of the default model: a call that answers before
// its tail (a reply's closing tokens) is evaluated. The next call, save or eviction on that context waits
// for the tail and is never refused for it; a second call while the first still runs is BUSY; a tail that
// fails drops the hot copy, as a failed call does, and the context is usable again.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FabricError } from '../../src/fabric';
import { HotSequences } from '../../src/engines/llama/hot-sequences';
import { openLlama, type OpenedLlama } from '../../src/engines/llama/open-llama';

let opened: OpenedLlama;
let hot: HotSequences;

beforeAll(async () => {
  opened = await openLlama({ contextLength: 256, hotContexts: 2 });
  hot = new HotSequences(opened.context);
});

afterAll(async () => {
  await hot?.close();
  await opened?.context.dispose();
  await opened?.model.dispose();
  await opened?.llama.dispose();
});

/** A tail that ends when `open` is called, and says whether it has. */
function gatedTail(): { tail: () => Promise<void>; open: () => void; ended: () => boolean } {
  let open = () => {};
  let ended = false;
  const gate = new Promise<void>((resolve) => (open = resolve));
  return {
    tail: async () => {
      await gate;
      ended = true;
    },
    open: () => open(),
    ended: () => ended,
  };
}

/** Settles when the event loop has run everything already queued: what a waiting call would have done by then. */
const turnOfTheLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('HotSequences', () => {
  it('answers before the tail; the next call and a save wait for it, and neither is BUSY', async () => {
    const gated = gatedTail();
    const answer = await hot.answer('k-wait', async () => {
      hot.touch('k-wait', await hot.free(), true);
      return { value: 'answered', tail: gated.tail };
    });
    expect(answer).toBe('answered');
    expect(gated.ended()).toBe(false);

    const order: string[] = [];
    const next = hot.exclusive('k-wait', async () => {
      order.push(gated.ended() ? 'call after the tail' : 'call during the tail');
    });
    // A second call while `next` waits: a call on the context is pending, so this one is BUSY.
    await expect(hot.exclusive('k-wait', async () => undefined)).rejects.toMatchObject({ code: 'BUSY' });
    await turnOfTheLoop();
    expect(order).toEqual([]);
    gated.open();
    await next;
    const saved = await hot.reading('k-wait', async () => (gated.ended() ? 'read after the tail' : 'read during the tail'));
    expect(order).toEqual(['call after the tail']);
    expect(saved).toBe('read after the tail');
    expect(hot.of('k-wait')).toBeDefined();
    await hot.release('k-wait');
  });

  it('an eviction waits for the tail of the context it evicts', async () => {
    const gated = gatedTail();
    await hot.answer('k-evicted', async () => {
      hot.touch('k-evicted', await hot.free(), true);
      return { value: undefined, tail: gated.tail };
    });
    hot.touch('k-newer', await hot.free(), true);
    // Both sequences are taken and both unsaved: the least recently used, k-evicted, goes, once its tail has.
    let evicted = false;
    const third = hot.free().then((sequence) => {
      evicted = true;
      return sequence;
    });
    await turnOfTheLoop();
    expect(evicted).toBe(false);
    gated.open();
    const sequence = await third;
    expect(gated.ended()).toBe(true);
    expect(hot.of('k-evicted')).toBeUndefined();
    expect(hot.of('k-newer')).toBeDefined();
    await sequence.dispose();
    await hot.release('k-newer');
  });

  it('a tail that fails drops the hot copy; the next call finds none and goes on', async () => {
    let sequenceOfTail: { disposed: boolean } | undefined;
    await hot.answer('k-failed', async () => {
      const sequence = await hot.free();
      sequenceOfTail = sequence;
      hot.touch('k-failed', sequence, true);
      return { value: undefined, tail: async () => Promise.reject(new Error('llama.cpp failed the closing tokens')) };
    });
    const found = await hot.exclusive('k-failed', async () => hot.of('k-failed'));
    expect(found).toBeUndefined();
    expect(sequenceOfTail?.disposed).toBe(true);
  });

  it('a call that fails before answering runs no tail and drops the hot copy', async () => {
    let ran = false;
    await expect(
      hot.answer('k-error', async () => {
        hot.touch('k-error', await hot.free(), true);
        throw new FabricError('INTEGRITY', 'the loaded sequence does not hold the stored tokens');
        // biome-ignore lint/correctness/noUnreachable: the tail a successful call would have had
        return { value: undefined, tail: async () => void (ran = true) };
      }),
    ).rejects.toMatchObject({ code: 'INTEGRITY' });
    await turnOfTheLoop();
    expect(ran).toBe(false);
    expect(hot.of('k-error')).toBeUndefined();
  });
});
