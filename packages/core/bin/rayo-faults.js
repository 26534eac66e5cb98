#!/usr/bin/env node
// Runs the built fault-suite runner (pnpm build first in a checkout).
import '../dist/testing/faultRunner.js';
