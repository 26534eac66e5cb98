import { gunzipSync } from 'node:zlib';

const BLOCK = 512;

/** A NUL-terminated text field of a tar header. */
function field(header: Buffer, start: number, length: number): string {
  const raw = header.subarray(start, start + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end === -1 ? length : end).toString('utf8');
}

/**
 * The regular files of a gzipped tar archive (what `pnpm pack` writes), by
 * path, with their contents: ustar headers, with a pax `path` record for a
 * name longer than the header holds.
 */
export function tarballFiles(gzipped: Uint8Array): Map<string, Buffer> {
  const tar = gunzipSync(gzipped);
  const files = new Map<string, Buffer>();
  let longPath: string | undefined;
  for (let offset = 0; offset + BLOCK <= tar.length; ) {
    const header = tar.subarray(offset, offset + BLOCK);
    if (header.every((byte) => byte === 0)) break;
    const size = Number.parseInt(field(header, 124, 12).trim() || '0', 8);
    const type = field(header, 156, 1);
    const body = tar.subarray(offset + BLOCK, offset + BLOCK + size);
    if (type === 'x') {
      longPath = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(body.toString('utf8'))?.[1];
    } else if (type !== 'g') {
      const prefix = field(header, 345, 155);
      const name = field(header, 0, 100);
      if (type === '0' || type === '') files.set(longPath ?? (prefix ? `${prefix}/${name}` : name), body);
      longPath = undefined;
    }
    offset += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
  }
  return files;
}
