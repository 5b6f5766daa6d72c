// `npm run demo:ui`: serves the last demo's history (its SQLite file) in the Temporal Web UI until Ctrl-C.
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { startDevServer } from '../dev-server/dev-server';
import { ensureTemporalCli } from '../dev-server/temporal-cli';

async function main(): Promise<void> {
  const dbFile = join(process.env.KVFABRIC_DEMO_DIR ?? join(resolve(__dirname, '..', '..'), '.kvfabric', 'demo'), 'temporal.db');
  if (!existsSync(dbFile)) throw new Error(`no demo history at ${dbFile}: run \`npm run demo\` first`);
  const server = await startDevServer({ cli: ensureTemporalCli(), dbFile, port: 7233, ui: { port: 8233 } });
  console.log(`Temporal Web UI: ${server.uiUrl}/namespaces/default/workflows (the last demo's agents) -- Ctrl-C to stop`);
  await new Promise<void>((done) => process.once('SIGINT', () => done()));
  await server.stop();
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
