// Whether an AI SDK run takes the shared prefix of its tenant (docs/tiers.md#prefix-sharing), from the
// call's `providerOptions.kvfabric.sharing`: 'tenant' (the default, as for agents) or 'none'. Workflow
// code may set it: unlike the owner, it can only narrow what the call shares, never reach another
// tenant's KV. Only a run's first call (an empty context) asks; later calls continue the run's own KV.
import type { SharedV4ProviderOptions } from '@ai-sdk/provider';

import { FabricError } from '../fabric/errors';

export type ModelCallSharing = 'tenant' | 'none';

/** The call's sharing setting; INVALID_ARGUMENT for anything but 'tenant' or 'none'. */
export function modelCallSharingOf(providerOptions: SharedV4ProviderOptions | undefined): ModelCallSharing {
  const sharing = providerOptions?.kvfabric?.sharing;
  if (sharing === undefined) return 'tenant';
  if (sharing === 'tenant' || sharing === 'none') return sharing;
  throw new FabricError('INVALID_ARGUMENT', `providerOptions.kvfabric.sharing is 'tenant' or 'none', not ${JSON.stringify(sharing)}`);
}
