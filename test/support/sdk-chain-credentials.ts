// A test's S3 credentials the way a worker gets them: from the AWS SDK's default chain, here its
// environment variables, never in a tier URL or an option. Returns the function that puts back what was there.
import type { SeaweedfsServer } from './seaweedfs';

const VARIABLES = ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'] as const;

export function credentialsInEnvironment(server: SeaweedfsServer): () => void {
  const saved = VARIABLES.map((name) => [name, process.env[name]] as const);
  process.env.AWS_ACCESS_KEY_ID = server.credentials.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = server.credentials.secretAccessKey;
  return () => {
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  };
}
