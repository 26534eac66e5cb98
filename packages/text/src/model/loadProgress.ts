/**
 * How far loading a model's weights has come. The same shape as
 * `@rayo/train`'s load progress, so that one callback serves both.
 */
export interface LoadProgress {
  readonly tensorsLoaded: number;
  readonly tensorsTotal: number;
  readonly bytesLoaded: number;
  readonly bytesTotal: number;
}
