// One worker's index of shared prefixes: block key (prefix-keys.ts) -> the holder contexts whose pages
// are that prefix. A holder is a context of its own (a fork taken when an agent's pages held exactly the
// prefix), so the allocator's reference counts keep its blocks while anything shares them, and copy on
// write keeps them unchanged. Invariants:
//  - a holder's keys are the keys of its full blocks, in order: key i found means blocks 0..i match;
//  - a holder lives while a context refers to it (the agent that published it, those that took it);
//    once none does it is idle: still found (a lookup refers to it again) until the caller expires it,
//    and its keys are forgotten with it.
// Keys are salted per tenant, so one tenant's lookups can only ever find its own tenant's holders.

/** A prefix found: the holder context and how many of its full blocks match. */
export interface PrefixHit {
  holderId: string;
  blocks: number;
}

interface Holder {
  readonly id: string;
  readonly keys: readonly string[];
  readonly users: Set<string>;
}

export class PrefixIndex {
  private readonly byKey = new Map<string, Holder[]>();
  private readonly holders = new Map<string, Holder>();
  /** Context -> holders it refers to. */
  private readonly referred = new Map<string, Set<Holder>>();

  /** The longest run of `keys` some live holder has (isLive: the holder's context still exists). */
  longest(keys: readonly string[], isLive: (holderId: string) => boolean): PrefixHit | undefined {
    for (let i = keys.length - 1; i >= 0; i--) {
      for (const holder of this.byKey.get(keys[i]!) ?? []) {
        if (isLive(holder.id)) return { holderId: holder.id, blocks: i + 1 };
        this.forget(holder); // freed behind the index's back (a fenced worker's drop): never offered again
      }
    }
    return undefined;
  }

  /** Records holder `holderId`, whose blocks have `keys`, referred to by `user` (none: idle from the start). */
  publish(holderId: string, keys: readonly string[], user?: string): void {
    const holder: Holder = { id: holderId, keys: [...keys], users: new Set() };
    this.holders.set(holderId, holder);
    for (const key of keys) this.byKey.set(key, [...(this.byKey.get(key) ?? []), holder]);
    if (user !== undefined) this.refer(holderId, user);
  }

  /** `user` now shares the holder's blocks. */
  refer(holderId: string, user: string): void {
    const holder = this.holders.get(holderId);
    if (!holder) return;
    holder.users.add(user);
    const mine = this.referred.get(user) ?? new Set();
    mine.add(holder);
    this.referred.set(user, mine);
  }

  /** Drops every reference of `user`; returns the holders nothing refers to any more (idle now: the caller times them). */
  drop(user: string): string[] {
    const unused: string[] = [];
    for (const holder of this.referred.get(user) ?? []) {
      holder.users.delete(user);
      if (holder.users.size === 0) unused.push(holder.id);
    }
    this.referred.delete(user);
    return unused;
  }

  /** Forgets an idle holder; returns its keys (the caller frees it), or undefined when it is referred to again or gone. */
  expire(holderId: string): readonly string[] | undefined {
    const holder = this.holders.get(holderId);
    if (!holder || holder.users.size > 0) return undefined;
    this.forget(holder);
    return holder.keys;
  }

  isHolder(contextId: string): boolean {
    return this.holders.has(contextId);
  }

  /** Keys known (tests and metrics). */
  get keyCount(): number {
    return this.byKey.size;
  }

  private forget(holder: Holder): void {
    this.holders.delete(holder.id);
    for (const key of holder.keys) {
      const rest = (this.byKey.get(key) ?? []).filter((other) => other !== holder);
      if (rest.length > 0) this.byKey.set(key, rest);
      else this.byKey.delete(key);
    }
    for (const user of holder.users) this.referred.get(user)?.delete(holder);
  }
}
