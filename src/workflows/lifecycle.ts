// The agent's lifecycle as an explicit state machine: which phase each event leads to, and which phases
// a timer watches. Pure and free of Temporal, so the workflow, its update validators and the unit tests
// share one table.
//
//   created -turn-> active -done-> idle -idle timer-> warm -warm timer-> cold
//      \_________________________/  ^      |  ^                            |
//                                   |      |  +---------- suspend(host)    |
//   warm | cold -resume-> resumed --+      +------------- suspend(disk) ---+
//   warm | cold -prefetched to the device (a wake-up's prefetch)-> idle
//   cold -prefetched to host (a wake-up's prefetch without device room)-> warm
//   (any but released) -release-> released;  holder lost -> cold (adopted from disk by another worker)

export type AgentPhase = 'created' | 'active' | 'idle' | 'warm' | 'cold' | 'resumed' | 'released';

export type LifecycleEvent =
  | 'turn-started'
  | 'turn-finished'
  | 'idle-timeout'
  | 'warm-timeout'
  | 'suspended-host'
  | 'suspended-disk'
  | 'resumed'
  | 'prefetched-device'
  | 'prefetched-host'
  | 'holder-lost'
  | 'released';

/** Phases in which the context waits on the device for its next turn. */
const RESIDENT_WAITING: readonly AgentPhase[] = ['created', 'idle', 'resumed'];

const TRANSITIONS: Record<LifecycleEvent, { from: readonly AgentPhase[]; to: AgentPhase }> = {
  'turn-started': { from: ['created', 'idle', 'resumed'], to: 'active' },
  'turn-finished': { from: ['active'], to: 'idle' },
  'idle-timeout': { from: RESIDENT_WAITING, to: 'warm' },
  'warm-timeout': { from: ['warm'], to: 'cold' },
  'suspended-host': { from: RESIDENT_WAITING, to: 'warm' },
  'suspended-disk': { from: [...RESIDENT_WAITING, 'warm'], to: 'cold' },
  resumed: { from: ['warm', 'cold'], to: 'resumed' },
  // Where a resident agent waits: the call at the planned instant then finds the agent as it finds a
  // resident one, and moves it nowhere, so its task publishes no search attributes (a hot call's events).
  'prefetched-device': { from: ['warm', 'cold'], to: 'idle' },
  // Its pages in host memory, as after an idle timer: the warm timer takes them back to disk unused.
  'prefetched-host': { from: ['cold'], to: 'warm' },
  // The holder died: the context was adopted from the cold tier by another worker. A turn in progress
  // restores it and carries on, so 'active' stays.
  'holder-lost': { from: [...RESIDENT_WAITING, 'warm', 'cold'], to: 'cold' },
  released: { from: ['created', 'active', 'idle', 'warm', 'cold', 'resumed'], to: 'released' },
};

export class LifecycleError extends Error {
  constructor(
    readonly phase: AgentPhase,
    readonly event: LifecycleEvent,
  ) {
    super(`an agent that is ${phase} cannot take '${event}'`);
    this.name = 'LifecycleError';
  }
}

export function canTake(phase: AgentPhase, event: LifecycleEvent): boolean {
  return TRANSITIONS[event].from.includes(phase);
}

/** The phase after `event`; LifecycleError when the phase does not admit it. */
export function next(phase: AgentPhase, event: LifecycleEvent): AgentPhase {
  if (!canTake(phase, event)) throw new LifecycleError(phase, event);
  return TRANSITIONS[event].to;
}

/** Which timer runs in a phase: idle -> warm after `idleToWarm`, warm -> cold after `warmToCold`. */
export function timerOf(phase: AgentPhase): 'idle-timeout' | 'warm-timeout' | undefined {
  // A turn in progress keeps the idle timer's class: turns then cost no timer events (see agent.ts).
  if (RESIDENT_WAITING.includes(phase) || phase === 'active') return 'idle-timeout';
  if (phase === 'warm') return 'warm-timeout';
  return undefined;
}
