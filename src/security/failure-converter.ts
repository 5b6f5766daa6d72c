// Failure messages and stack traces move into an encoded attributes payload, which the payload codec
// then seals: an error naming a context or a count is as private as a result. Loaded by path, not
// imported (failureConverterPath in data-converter.ts): bundled into the workflow sandbox, and required
// by the client and the worker, where a test runner may load it with Node's own loader: so this file is
// plain JavaScript besides its imports, and imports packages only.
// One failure stays readable: the codec's refusal of a plaintext payload (PLAINTEXT_REFUSAL), kvfabric's
// fixed words and nothing else (no stack, no cause). Sealed, it would reach the plain Temporal client that
// sent the payload as `Unknown encoding: binary/encrypted`, which says nothing of what to do.
import { DefaultFailureConverter } from '@temporalio/common';

/** What the codec says of a plaintext payload (payload-codec.ts): names no key, context or value; says what to do. */
export const PLAINTEXT_REFUSAL =
  'a plaintext payload was refused: payloads must be sealed with a payload codec key this process holds ' +
  "(sent by a Temporal client without kvfabric's codec? " +
  "add kvfabric's client plugin, KvFabricClientPlugin from 'kvfabric/plugin', to that client, with the workers' payload codec keys)";

/** The error the SDK's payload converter throws on the refused payload (refused-payloads.ts puts it in the payload's place). */
const PLAINTEXT_REFUSAL_ERROR = `Unknown encoding: kvfabric-refused PERMISSION_DENIED (${PLAINTEXT_REFUSAL})`;

const converter = new DefaultFailureConverter({ encodeCommonAttributes: true });
const sealedFailureOf = converter.errorToFailure.bind(converter);
converter.errorToFailure = (err, payloadConverter, context) => {
  if (!(err instanceof Error && err.message === PLAINTEXT_REFUSAL_ERROR && err.cause === undefined))
    return sealedFailureOf(err, payloadConverter, context);
  return { ...converter.errorToFailureInner(err, payloadConverter, context), stackTrace: '' };
};

export const failureConverter = converter;
