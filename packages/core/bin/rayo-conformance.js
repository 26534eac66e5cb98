#!/usr/bin/env node
// Runs the built conformance runner (pnpm build first in a checkout).
import '../dist/testing/runner.js';
