/**
 * Races work against the loss of a device. `Promise.race([work, lost])`
 * would leave a reaction on `lost` (pending for the device's lifetime) at
 * every call, keeping each call's closures alive: the JavaScript heap grew
 * by about 0.3 KB per eager call. Here `lost` has one reaction, and each
 * race only adds itself to a set it leaves when its work settles.
 */
export function lossRace(lost: Promise<never>): <T>(work: Promise<T>) => Promise<T> {
  const waiting = new Set<(error: unknown) => void>();
  let lostWith: { error: unknown } | undefined;
  lost.catch((error: unknown) => {
    lostWith = { error };
    for (const reject of waiting) reject(error);
    waiting.clear();
  });
  return <T>(work: Promise<T>): Promise<T> => {
    if (lostWith) return Promise.reject(lostWith.error);
    return new Promise<T>((resolve, reject) => {
      waiting.add(reject);
      work.then(
        (value) => {
          waiting.delete(reject);
          resolve(value);
        },
        (error: unknown) => {
          waiting.delete(reject);
          reject(error);
        },
      );
    });
  };
}
