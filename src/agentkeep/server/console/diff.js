// What changed between two revisions' definitions: leaf paths added, removed or changed.

function flatten(value, prefix, out) {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const keys = Object.keys(value);
    if (keys.length === 0 && prefix) out.set(prefix, '{}');
    for (const key of keys) flatten(value[key], prefix ? `${prefix}.${key}` : key, out);
  } else {
    out.set(prefix, JSON.stringify(value));
  }
  return out;
}

// [{path, kind: 'added'|'removed'|'changed', before, after}] in path order.
export function changes(before, after) {
  const a = flatten(before || {}, '', new Map());
  const b = flatten(after || {}, '', new Map());
  const paths = [...new Set([...a.keys(), ...b.keys()])].sort();
  const found = [];
  for (const path of paths) {
    if (!a.has(path)) found.push({ path, kind: 'added', after: b.get(path) });
    else if (!b.has(path)) found.push({ path, kind: 'removed', before: a.get(path) });
    else if (a.get(path) !== b.get(path)) {
      found.push({ path, kind: 'changed', before: a.get(path), after: b.get(path) });
    }
  }
  return found;
}
