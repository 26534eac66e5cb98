import { type Backend, InvalidArgumentError } from '@rayo/core';
import { checkLlamaBackend, defaultKvCacheDtype, fusedDecodeSupported } from './backendDtypes.js';
import { openLlamaCheckpoint } from './checkpoint.js';
import { checkSlidingWindow, type LlamaConfig } from './config.js';
import { fuseQkvProjections, fuseQuantizedQkv } from './fusedQkv.js';
import { checkDtypeOption, type LlamaLoadOptions, type LlamaModelOptions } from './modelOptions.js';
import { checkOwnHead, checkWeightFormat, LlamaLayerQuantizer } from './quantizedLayers.js';
import {
  checkLlamaTensors,
  checkpointWeightDtype,
  type LlamaWeights,
  llamaWeightTensors,
  uploadLlamaWeights,
} from './weights.js';

/**
 * Reads a Hugging Face checkpoint directory onto `backend` (see
 * `LlamaModel.load`): the options and the backend checked before any weight
 * is read, the weights uploaded tensor by tensor in the chosen dtype,
 * quantized where asked and each layer's q, k and v fused where they can
 * be (`fuseQkvProjections`), and `make` given the config, the weights and the
 * options of the model. Should anything fail after the upload, `make`
 * included, the weights are freed.
 */
export async function loadLlamaCheckpoint<T>(
  backend: Backend,
  dir: string,
  options: LlamaLoadOptions,
  make: (config: LlamaConfig, weights: LlamaWeights, options: LlamaModelOptions) => T,
): Promise<T> {
  const choice = options.weightDtype ?? 'checkpoint';
  checkDtypeOption('weightDtype', choice, ['checkpoint']);
  checkDtypeOption('kvCacheDtype', options.kvCacheDtype ?? 'f32');
  if (options.weightFormat !== undefined) checkWeightFormat(backend, options.weightFormat);
  const checkpoint = await openLlamaCheckpoint(dir, options);
  try {
    checkSlidingWindow(checkpoint.config, options.maxSequence ?? checkpoint.config.maxPositionEmbeddings);
    checkLlamaTensors(checkpoint.config, checkpoint.tensors);
    const dtype =
      choice === 'checkpoint' ? checkpointWeightDtype(checkpoint.config, checkpoint.tensors) : choice;
    const cacheDtype = options.kvCacheDtype ?? defaultKvCacheDtype(backend, dtype);
    const fused = options.fused ?? fusedDecodeSupported(backend, dtype, cacheDtype);
    checkLlamaBackend(backend, dtype, cacheDtype, fused);
    if (options.quantizeHead && options.weightFormat === undefined) {
      throw new InvalidArgumentError('quantizeHead needs a weightFormat', {
        operation: 'LlamaModel',
        argument: 'quantizeHead',
        expected: 'weightFormat given',
        actual: 'no weightFormat',
      });
    }
    if (options.quantizeHead) checkOwnHead(!checkpoint.config.tieWordEmbeddings);
    // Each layer quantized as soon as it is uploaded: the device holds one layer's dense projections at a time.
    const quantizer =
      options.weightFormat === undefined
        ? undefined
        : new LlamaLayerQuantizer(backend, options.weightFormat, options.quantizeOn);
    let weights: LlamaWeights;
    try {
      weights = await uploadLlamaWeights(
        backend,
        checkpoint.config,
        checkpoint.tensors,
        dtype,
        options.onProgress,
        quantizer && ((layer) => quantizer.addLayer(layer)),
      );
    } catch (error) {
      quantizer?.dispose();
      throw error;
    }
    let quantized: LlamaModelOptions['quantized'];
    try {
      if (quantizer) {
        if (options.quantizeHead) await quantizer.addHead(weights.head!);
        const made = await quantizer.finish();
        // The dense head was freed as it was quantized.
        if (made.head) weights = { ...weights, head: undefined };
        quantized =
          options.fuseQkv === false
            ? made
            : {
                ...made,
                layers: await fuseQuantizedQkv(backend, checkpoint.config, made.layers, cacheDtype),
              };
      }
      if (options.fuseQkv !== false)
        weights = fuseQkvProjections(backend, checkpoint.config, weights, cacheDtype, quantized?.layers);
      return make(checkpoint.config, weights, { ...options, kvCacheDtype: cacheDtype, quantized });
    } catch (error) {
      for (const t of llamaWeightTensors(weights)) t.dispose();
      quantizer?.dispose();
      throw error;
    }
  } finally {
    await checkpoint.close();
  }
}
