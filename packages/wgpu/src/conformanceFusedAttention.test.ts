import { describeWgpuConformance, FUSED_ATTENTION_GROUPS } from '../testing/conformanceHalves.js';

// The fused, flash attention and paged attention groups of the conformance
// suite: about half of its compile time on lavapipe (see FUSED_ATTENTION_GROUPS).
await describeWgpuConformance('wgpu backend conformance (fused and attention)', (group) =>
  FUSED_ATTENTION_GROUPS.has(group),
);
