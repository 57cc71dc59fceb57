// Building DOM without HTML strings: every text goes through a Text node (escaped by the
// browser), never parsed as HTML. Attributes are set with setAttribute; handlers with on<event>.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = value;
    } else if (key === 'dataset') {
      Object.assign(el.dataset, value);
    } else if (key === 'value') {
      el.value = value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

// A link inside the console (the hash router); each part is URI-encoded.
export function link(text, ...parts) {
  return h('a', { href: '#/' + parts.map(encodeURIComponent).join('/') }, text);
}

export function when(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString();
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

export function errorBox(error) {
  return h('p', { class: 'error', role: 'alert' }, String(error && error.message || error));
}
