import { describeWgpuConformance, FUSED_ATTENTION_GROUPS } from '../testing/conformanceHalves.js';

// Every conformance group but the fused and attention kernels' (those run in
// conformanceFusedAttention.test.ts, beside this file on another core).
await describeWgpuConformance('wgpu backend conformance', (group) => !FUSED_ATTENTION_GROUPS.has(group));
