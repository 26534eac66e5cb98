/** What `call` throws, or undefined where it returns. */
export function thrownBy(call: () => unknown): unknown {
  try {
    call();
  } catch (error) {
    return error;
  }
  return undefined;
}

/** What `call` throws or rejects with, or undefined where it resolves. */
export async function rejectionOf(call: () => unknown): Promise<unknown> {
  try {
    await call();
  } catch (error) {
    return error;
  }
  return undefined;
}
