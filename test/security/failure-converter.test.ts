// kvfabric's failure converter seals every failure's message and stack, except the codec's refusal of a
// plaintext payload: fixed words naming nothing, which the plain Temporal client that sent the payload
// must be able to read (issue 39: it read `Unknown encoding: binary/encrypted`).
import { ApplicationFailure, defaultPayloadConverter } from '@temporalio/common';
import { describe, expect, it } from 'vitest';

import { PLAINTEXT_REFUSAL, failureConverter } from '../../src/security/failure-converter';

const REFUSAL = `Unknown encoding: kvfabric-refused PERMISSION_DENIED (${PLAINTEXT_REFUSAL})`;

describe('the failure converter', () => {
  it('leaves the plaintext refusal readable, without its stack', () => {
    const failure = failureConverter.errorToFailure(
      ApplicationFailure.create({ type: 'PayloadConverterError', message: REFUSAL }),
      defaultPayloadConverter,
    );
    expect(failure).toMatchObject({ message: REFUSAL, stackTrace: '' });
    expect(failure.encodedAttributes).toBeUndefined();
    expect(failure.message).toContain("add kvfabric's client plugin");
  });

  it.each([
    ['any other error', ApplicationFailure.create({ type: 'INVALID_STATE', message: 'agent a is released' })],
    [
      'a refusal naming a key',
      ApplicationFailure.create({
        message: "Unknown encoding: kvfabric-refused PERMISSION_DENIED (payload sealed with key 'k2', which this process does not hold)",
      }),
    ],
    ['the refusal with a cause', ApplicationFailure.create({ message: REFUSAL, cause: new Error('context ctx-1 has 12 tokens') })],
  ])('seals %s', (_what, error) => {
    const failure = failureConverter.errorToFailure(error, defaultPayloadConverter);
    expect(failure.message).toBe('Encoded failure');
    expect(failure.encodedAttributes).toBeDefined();
  });
});
