import { formatShape, RayoError, shapesEqual, type Tensor } from '@rayo/core';
import { GradientHolds, type TensorLifetimes } from './lifetimes.js';
import type { Variable } from './variable.js';

/** What a backward pass needs of its tape. */
export interface BackwardGraph {
  /** The recorded nodes, in recording order. */
  readonly nodes: readonly Variable[];
  readonly lifetimes: TensorLifetimes;
  /** `a + b` on the tape: two contributions to one gradient. */
  add(a: Tensor, b: Tensor): Tensor;
}

/**
 * The gradients of one `Tape.backward`: which variable's gradient is which
 * tensor, and when a tensor is dead. One gradient tensor may stand for
 * several variables (an addition passes `dy` to both inputs, a reshape a
 * view of it); the holds count them across every propagation of the pass,
 * including those a checkpointed segment runs inside a rule, so that none
 * frees a tensor another still holds.
 */
export class BackwardPass {
  readonly #graph: BackwardGraph;
  readonly #holds = new GradientHolds();

  constructor(graph: BackwardGraph) {
    this.#graph = graph;
  }

  setGrad(grads: Map<Variable, Tensor>, v: Variable, g: Tensor): void {
    const previous = grads.get(v);
    grads.set(v, g);
    this.#holds.hold(g);
    if (previous) this.#holds.drop(previous);
  }

  dropGrad(grads: Map<Variable, Tensor>, v: Variable): Tensor {
    const g = grads.get(v)!;
    grads.delete(v);
    this.#holds.drop(g);
    return g;
  }

  /** Gives a tensor born after `mark` that no gradient entry holds to later kernels. */
  freeIfDead(t: Tensor, mark: number): void {
    const lifetimes = this.#graph.lifetimes;
    if (lifetimes.bornAfter(t, mark) && !this.#holds.held(t)) lifetimes.free(t.base);
  }

  /**
   * Runs the backward rules of nodes `end` down to `start` that a gradient
   * in `grads` reaches, adding what they give to `grads`. Gradients and
   * temporaries born after `mark` die as soon as nothing holds them; so do
   * scope tensors after the last rule that reads them. `afterNode(i)` runs
   * after node i's rule (leaves whose gradients are final then).
   */
  propagate(
    grads: Map<Variable, Tensor>,
    end: number,
    start: number,
    mark: number,
    afterNode?: (i: number) => void,
  ): void {
    const { nodes, lifetimes } = this.#graph;
    for (let i = end; i >= start; i--) {
      const node = nodes[i]!;
      if (!grads.has(node)) continue;
      const ruleMark = lifetimes.mark;
      const dy = this.dropGrad(grads, node);
      const replaced: Tensor[] = [dy];
      const needs = node.inputs.map((v) => v.requiresGrad);
      const dxs = node.backwardFn!(dy, needs);
      node.inputs.forEach((input, j) => {
        const dx = dxs[j];
        if (!needs[j] || !dx) return;
        if (!shapesEqual(dx.shape, input.shape)) {
          throw new RayoError('a backward rule produced a gradient of the wrong shape', {
            operation: 'backward',
            argument: `input ${j}`,
            expected: formatShape(input.shape),
            actual: formatShape(dx.shape),
          });
        }
        const previous = grads.get(input);
        if (previous) replaced.push(previous);
        this.setGrad(grads, input, previous ? this.#graph.add(previous, dx) : dx);
      });
      for (const t of replaced) this.freeIfDead(t, mark);
      for (const t of lifetimes.bornSince(ruleMark)) this.freeIfDead(t, mark);
      lifetimes.afterRule(i);
      afterNode?.(i);
    }
  }
}
