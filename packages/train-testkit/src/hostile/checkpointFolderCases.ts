import { join } from 'node:path';
import { openLlamaCheckpoint } from '@rayo/train';
import { fifo, type HostileCase, type HostileReader, link, put, sparse } from './hostileFiles.js';
import { validSafetensors } from './safetensorsCases.js';

/** Opens a Hugging Face checkpoint folder: config.json, the index where there is one, every shard's header. */
export const checkpointFolderReader: HostileReader = {
  name: 'openLlamaCheckpoint',
  namesFile: true,
  async read(path) {
    await (await openLlamaCheckpoint(path)).close();
  },
};

/** A valid config of a one-layer decoder. */
export const TINY_CONFIG = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  hidden_size: 8,
  intermediate_size: 16,
  num_attention_heads: 2,
  num_key_value_heads: 1,
  num_hidden_layers: 1,
  vocab_size: 16,
  max_position_embeddings: 32,
  rms_norm_eps: 1e-5,
};

/** Writes a valid single-file checkpoint into `folder` (config.json and model.safetensors). */
export async function validFolder(folder: string, config: object = TINY_CONFIG): Promise<string> {
  await put(folder, 'config.json', JSON.stringify(config));
  await put(folder, 'model.safetensors', validSafetensors());
  return folder;
}

const INDEX = 'model.safetensors.index.json';

/** Writes a sharded checkpoint whose index maps tensor `a` to `shardA` and `b` to `shardB`. */
async function shardedFolder(folder: string, weightMap: Record<string, unknown>): Promise<string> {
  await put(folder, 'config.json', JSON.stringify(TINY_CONFIG));
  await put(folder, INDEX, JSON.stringify({ metadata: {}, weight_map: weightMap }));
  return folder;
}

function folderCase(
  kind: string,
  name: string,
  write: (folder: string, dir: string) => Promise<unknown>,
  mentions?: RegExp,
): HostileCase {
  return {
    kind: `checkpoint folder: ${kind}`,
    name,
    reader: checkpointFolderReader,
    mentions,
    async write(dir) {
      const folder = join(dir, 'checkpoint');
      await write(folder, dir);
      return folder;
    },
  };
}

function configs(): HostileCase[] {
  const field = (name: string, patch: Record<string, unknown>, mentions: RegExp) =>
    folderCase(
      'config.json fields',
      name,
      (folder) => validFolder(folder, { ...TINY_CONFIG, ...patch }),
      mentions,
    );
  return [
    field('num_hidden_layers 1e9', { num_hidden_layers: 1e9 }, /num_hidden_layers/),
    field('num_hidden_layers 4097', { num_hidden_layers: 4097 }, /num_hidden_layers/),
    field('hidden_size 2^40', { hidden_size: 2 ** 40, num_attention_heads: 2 }, /hidden_size/),
    field('intermediate_size 1e10', { intermediate_size: 1e10 }, /intermediate_size/),
    field('vocab_size 1e12', { vocab_size: 1e12 }, /vocab_size/),
    field('max_position_embeddings 1e15', { max_position_embeddings: 1e15 }, /max_position_embeddings/),
    field('num_attention_heads 2^20', { num_attention_heads: 2 ** 20, head_dim: 2 }, /num_attention_heads/),
    field('head_dim 2^20', { head_dim: 2 ** 20 }, /head_dim/),
    field('num_hidden_layers negative', { num_hidden_layers: -1 }, /num_hidden_layers/),
    field('num_hidden_layers a string', { num_hidden_layers: '1' }, /num_hidden_layers/),
    field(
      'layer_types of 10^5 entries',
      {
        model_type: 'qwen2',
        architectures: ['Qwen2ForCausalLM'],
        use_sliding_window: true,
        sliding_window: 4,
        layer_types: Array(1e5).fill('full_attention'),
      },
      /layer_types/,
    ),
  ];
}

function configFiles(): HostileCase[] {
  const file = (name: string, write: (folder: string, dir: string) => Promise<unknown>, mentions?: RegExp) =>
    folderCase('config.json file', name, write, mentions);
  /** The weights in place and config.json a link to `target`. */
  const configLink = (name: string, target: string, mentions: RegExp) =>
    file(
      name,
      async (folder) => {
        await put(folder, 'model.safetensors', validSafetensors());
        await link(folder, 'config.json', target);
      },
      mentions,
    );
  return [
    file('missing', (folder) => put(folder, 'model.safetensors', validSafetensors()), /ENOENT/),
    file(
      'a FIFO',
      async (folder) => {
        await fifo(folder, 'config.json');
        await put(folder, 'model.safetensors', validSafetensors());
      },
      /regular file/,
    ),
    file('a folder', (folder) => put(folder, 'config.json/inner', '{}'), /regular file/),
    file(
      '17 MiB (sparse)',
      async (folder) => {
        await validFolder(folder);
        await sparse(folder, 'config.json', 17 * 2 ** 20);
      },
      /larger than/,
    ),
    file(
      'a link out of the folder',
      async (folder, dir) => {
        await put(folder, 'model.safetensors', validSafetensors());
        await put(dir, 'elsewhere.json', JSON.stringify(TINY_CONFIG));
        await link(folder, 'config.json', '../elsewhere.json');
      },
      /links outside/,
    ),
    configLink('a link to a device', '/dev/zero', /links outside|regular file/),
    configLink('a dangling link', 'absent.json', /ENOENT/),
    configLink('a link to itself', 'config.json', /ELOOP/),
    file('not JSON', (folder) => put(folder, 'config.json', '{"hidden_size": '), /not JSON/),
    file('not UTF-8', (folder) => put(folder, 'config.json', Uint8Array.of(0x7b, 0xff, 0x7d)), /not JSON/),
    file('JSON null', (folder) => put(folder, 'config.json', 'null'), /config/),
    file('a JSON array', (folder) => put(folder, 'config.json', '[]'), /config/),
    file(
      'architectures nested 50 deep',
      (folder) =>
        put(
          folder,
          'config.json',
          JSON.stringify({ ...TINY_CONFIG, architectures: JSON.parse(`${'['.repeat(50)}${']'.repeat(50)}`) }),
        ),
      /architectures/,
    ),
    file(
      'arrays nested 100000 deep',
      (folder) => put(folder, 'config.json', `${'['.repeat(100_000)}${']'.repeat(100_000)}`),
      /nests too deeply/,
    ),
  ];
}

function shardNames(): HostileCase[] {
  const shard = (name: string, target: unknown) =>
    folderCase('shard names', name, (folder) => shardedFolder(folder, { a: target }), /invalid shard/);
  return [
    shard('empty', ''),
    shard('.', '.'),
    shard('..', '..'),
    shard('a path into a folder', 'sub/model.safetensors'),
    shard('a path out of the folder', '../model.safetensors'),
    shard('an absolute path', '/etc/passwd'),
    shard('a Windows separator', '..\\model.safetensors'),
    shard('a NUL byte', 'model\0.safetensors'),
    shard('a number', 3),
    shard('null', null),
  ];
}

function shards(): HostileCase[] {
  const sharded = (
    name: string,
    write: (folder: string, dir: string) => Promise<unknown>,
    mentions?: RegExp,
  ) => folderCase('shards and index', name, write, mentions);
  const single = (
    name: string,
    write: (folder: string, dir: string) => Promise<unknown>,
    mentions?: RegExp,
  ) =>
    folderCase(
      'single weight file',
      name,
      async (folder, dir) => {
        await put(folder, 'config.json', JSON.stringify(TINY_CONFIG));
        await write(folder, dir);
      },
      mentions,
    );
  /** A valid config and, as the index, what `writeIndex` leaves. */
  const index = (name: string, writeIndex: (folder: string) => Promise<unknown>, mentions: RegExp) =>
    sharded(
      name,
      async (folder) => {
        await put(folder, 'config.json', JSON.stringify(TINY_CONFIG));
        await writeIndex(folder);
      },
      mentions,
    );
  const map = { a: 'model-1.safetensors', b: 'model-1.safetensors' };
  return [
    index('the index a FIFO', (folder) => fifo(folder, INDEX), /regular file/),
    index('the index 17 MiB (sparse)', (folder) => sparse(folder, INDEX, 17 * 2 ** 20), /larger than/),
    index('the index not JSON', (folder) => put(folder, INDEX, '{"weight_map":'), /not JSON/),
    index('no weight_map', (folder) => put(folder, INDEX, '{"metadata":{}}'), /weight_map/),
    index(
      'weight_map an array',
      (folder) => put(folder, INDEX, '{"weight_map":["model-1.safetensors"]}'),
      /weight_map/,
    ),
    sharded('a shard missing', (folder) => shardedFolder(folder, map), /ENOENT/),
    sharded(
      'a shard a FIFO',
      async (folder) => {
        await shardedFolder(folder, map);
        await fifo(folder, 'model-1.safetensors');
      },
      /regular file/,
    ),
    sharded(
      'a shard a folder',
      async (folder) => {
        await shardedFolder(folder, map);
        await put(folder, 'model-1.safetensors/inner', '');
      },
      /regular file/,
    ),
    sharded(
      'a shard a link out of the folder',
      async (folder, dir) => {
        await shardedFolder(folder, map);
        await put(dir, 'elsewhere.safetensors', validSafetensors());
        await link(folder, 'model-1.safetensors', '../elsewhere.safetensors');
      },
      /links outside/,
    ),
    sharded(
      'the index names a tensor its shard lacks',
      async (folder) => {
        await shardedFolder(folder, { ...map, c: 'model-1.safetensors' });
        await put(folder, 'model-1.safetensors', validSafetensors());
      },
      /'c'/,
    ),
    sharded(
      'a shard holds a tensor the index does not name',
      async (folder) => {
        await shardedFolder(folder, { a: 'model-1.safetensors' });
        await put(folder, 'model-1.safetensors', validSafetensors());
      },
      /'b'/,
    ),
    sharded(
      'a tensor in two shards',
      async (folder) => {
        await shardedFolder(folder, { a: 'model-1.safetensors', b: 'model-2.safetensors' });
        await put(folder, 'model-1.safetensors', validSafetensors());
        await put(folder, 'model-2.safetensors', validSafetensors());
      },
      /is not where the index says/,
    ),
    single('model.safetensors missing', async () => undefined, /ENOENT/),
    single('model.safetensors a FIFO', (folder) => fifo(folder, 'model.safetensors'), /regular file/),
    single(
      'model.safetensors a link out of the folder',
      async (folder, dir) => {
        await put(dir, 'elsewhere.safetensors', validSafetensors());
        await link(folder, 'model.safetensors', '../elsewhere.safetensors');
      },
      /links outside/,
    ),
    single('model.safetensors truncated', (folder) =>
      put(folder, 'model.safetensors', validSafetensors().subarray(0, 40)),
    ),
  ];
}

/** Checkpoint folders a careful loader refuses. */
export function checkpointFolderCases(): HostileCase[] {
  return [...configs(), ...configFiles(), ...shardNames(), ...shards()];
}
