/** What a signal handler needs of a communicator. */
interface Abortable {
  abort(reason?: string): void;
}

const live = new Set<Abortable>();
const SIGNALS = ['SIGINT', 'SIGTERM'] as const;

function onSignal(signal: NodeJS.Signals): void {
  for (const comm of [...live]) comm.abort(`process received ${signal}`);
  live.clear();
  for (const s of SIGNALS) process.removeListener(s, onSignal);
  // With the handlers gone, the signal's default action ends the process as it would have.
  process.kill(process.pid, signal);
}

/**
 * Aborts `comm` when the process gets SIGINT or SIGTERM, so that its peers
 * see a remote error at once instead of waiting for a timeout; the process
 * then dies of the signal as it would have. Returns the function that stops
 * tracking it.
 */
export function abortOnSignals(comm: Abortable): () => void {
  if (live.size === 0) for (const s of SIGNALS) process.on(s, onSignal);
  live.add(comm);
  return () => {
    if (!live.delete(comm) || live.size > 0) return;
    for (const s of SIGNALS) process.removeListener(s, onSignal);
  };
}
