// A command line used wrongly: a flag missing, malformed or unknown. The CLI prints it as one line that
// names the command and where its help is, and exits 2 (runtime failures exit 1), so a script can tell a
// call it got wrong from one that failed.
export class CliUsageError extends Error {
  readonly code = 'USAGE';

  constructor(
    message: string,
    /** The command it concerns; none for an unknown command or a call with none. */
    readonly command?: string,
  ) {
    super(message);
    this.name = 'CliUsageError';
  }

  /** `kvfabric: turn: --tokens must be ... (see kvfabric turn --help)`. */
  line(program = 'kvfabric'): string {
    const help = this.command ? `${program} ${this.command} --help` : `${program} --help`;
    return `${program}: ${this.command ? `${this.command}: ` : ''}${this.message} (see ${help})`;
  }
}

/** Exit status of a call that was used wrongly (runtime failures exit 1), as getopt-style tools do. */
export const USAGE_EXIT_CODE = 2;
