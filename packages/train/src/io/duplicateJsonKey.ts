const JSON_WHITESPACE = new Set([' ', '\t', '\n', '\r']);

/**
 * The first key that appears twice in one object of a JSON text, with the
 * path of that object (`a.b`), or undefined. `JSON.parse` keeps the last of
 * two equal keys silently; a file that says two things of one name is
 * refused instead. `text` must already parse as JSON: this scans it once,
 * in linear time, without building a tree.
 */
export function duplicateJsonKey(text: string): { readonly key: string; readonly path: string } | undefined {
  // One frame per open object or array: the keys seen (objects) and the key that holds it.
  const frames: { keys: Set<string> | undefined; name: string }[] = [];
  let pendingKey = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const start = i;
      for (i++; text[i] !== '"'; i++) if (text[i] === '\\') i++;
      const frame = frames[frames.length - 1];
      let j = i + 1;
      while (j < text.length && JSON_WHITESPACE.has(text[j]!)) j++;
      if (frame?.keys && text[j] === ':') {
        const key = JSON.parse(text.slice(start, i + 1)) as string;
        if (frame.keys.has(key))
          return {
            key,
            path: frames
              .slice(1)
              .map((f) => f.name)
              .join('.'),
          };
        frame.keys.add(key);
        pendingKey = key;
      }
    } else if (c === '{' || c === '[') {
      frames.push({ keys: c === '{' ? new Set() : undefined, name: pendingKey });
    } else if (c === '}' || c === ']') {
      frames.pop();
    }
  }
  return undefined;
}
