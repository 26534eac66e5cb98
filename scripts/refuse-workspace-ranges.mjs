#!/usr/bin/env node
// The `prepack` script of every published package. The manifests in the
// repository hold `workspace:` ranges (e.g. a peer `"@rayo/core":
// "workspace:^"`); `pnpm pack` and `pnpm publish` rewrite them into real
// ranges in the tarball, `npm pack` and `npm publish` keep them, and npm then
// refuses to install the package (EUNSUPPORTEDPROTOCOL). So packing with
// anything but pnpm stops here, before a broken tarball exists.
import { readFileSync } from 'node:fs';

const FIELDS = ['dependencies', 'peerDependencies', 'optionalDependencies', 'devDependencies'];

const manifest = JSON.parse(readFileSync('package.json', 'utf8'));
// What package manager runs this script: pnpm sets "pnpm/<version> …".
const packer = (process.env.npm_config_user_agent ?? '').split(' ')[0] || 'an unknown tool';

if (!packer.startsWith('pnpm/')) {
  const ranges = FIELDS.flatMap((field) =>
    Object.entries(manifest[field] ?? {})
      .filter(([, range]) => String(range).startsWith('workspace:'))
      .map(([name, range]) => `${field}["${name}"] = "${range}"`),
  );
  if (ranges.length > 0) {
    console.error(
      `${manifest.name}: refusing to pack with ${packer}: its package.json holds workspace: ranges ` +
        `(${ranges.join(', ')}), which only pnpm rewrites into real ranges; a tarball packed by another ` +
        'tool keeps them and does not install (npm: EUNSUPPORTEDPROTOCOL). ' +
        'Pack with `pnpm pack` and publish with `pnpm publish` (or `pnpm changeset publish`): see docs/releasing.md.',
    );
    process.exit(1);
  }
}
