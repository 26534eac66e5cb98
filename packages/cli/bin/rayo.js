#!/usr/bin/env node
// Runs the built CLI (pnpm build first in a checkout).
import '../dist/cli.js';
