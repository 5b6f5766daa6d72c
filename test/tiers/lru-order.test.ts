// LruOrder against a plain array model: after any sequence of touches and removals, the walk from the
// oldest and the oldest key are the model's, and a walk visits each key once even when keys are touched
// while it runs.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { LruOrder } from '../../src/tiers/lru-order';

type Op = { kind: 'touch' | 'remove'; key: number };
const op = fc.record({ kind: fc.constantFrom<'touch' | 'remove'>('touch', 'touch', 'remove'), key: fc.integer({ min: 0, max: 9 }) });

describe('LruOrder', () => {
  it('orders keys by last touch, like a model that moves a touched key to the end', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops: Op[]) => {
        const lru = new LruOrder<number>();
        let model: number[] = [];
        for (const { kind, key } of ops) {
          model = model.filter((k) => k !== key);
          if (kind === 'touch') {
            model.push(key);
            lru.touch(key);
          } else {
            lru.remove(key);
          }
          expect([...lru.fromOldest()]).toEqual(model);
          expect(lru.oldest()).toBe(model[0]);
          expect(lru.size).toBe(model.length);
        }
      }),
    );
  });

  it('visits each key once when the walk itself touches keys', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 0, max: 50 }), { minLength: 1, maxLength: 30 }),
        fc.array(fc.integer({ min: 0, max: 60 })),
        (keys, touches) => {
          const lru = new LruOrder<number>();
          keys.forEach((k) => lru.touch(k));
          const visited: number[] = [];
          let i = 0;
          for (const key of lru.fromOldest()) {
            visited.push(key);
            if (i < touches.length) lru.touch(touches[i++]!); // a touch mid-walk, sometimes of a new key
          }
          expect(new Set(visited).size).toBe(visited.length);
          for (const key of keys) expect(visited).toContain(key);
        },
      ),
    );
  });
});
