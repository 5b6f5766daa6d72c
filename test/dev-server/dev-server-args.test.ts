// The embedded dev server's command line: the dynamic config it changes by default, and a caller's value
// winning over it. (That the server accepts them, every Temporal test shows: they all start one.)
import { describe, expect, it } from 'vitest';

import { devServerArgs } from '../../src/dev-server/dev-server';

function dynamicConfigOf(args: string[]): string[] {
  return args.flatMap((arg, i) => (args[i - 1] === '--dynamic-config-value' ? [arg] : []));
}

describe('dev server command line', () => {
  it('lifts the transfer queue poll limit that throttled every agent operation to ten a second', () => {
    expect(dynamicConfigOf(devServerArgs({}, 7233, undefined))).toEqual(['history.transferProcessorMaxPollRPS=1000']);
  });

  it("keeps a caller's dynamic config, which wins over the defaults", () => {
    const args = devServerArgs(
      { dynamicConfig: { 'history.transferProcessorMaxPollRPS': 50, 'limit.historyCount.suggestContinueAsNew': 60 } },
      7233,
      8233,
    );
    expect(dynamicConfigOf(args)).toEqual(['history.transferProcessorMaxPollRPS=50', 'limit.historyCount.suggestContinueAsNew=60']);
    expect(args).toContain('--ui-port');
    expect(args).not.toContain('--headless');
  });
});
