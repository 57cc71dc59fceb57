// One ledger event as one element (data-seq = its sequence), built from the event alone.
// Messages are bubbles; tool calls and results are cards; everything else is a status line.
import { h, json, when } from './dom.js';

const TERMINAL = new Set(['turn.completed', 'turn.failed', 'turn.cancelled', 'turn.interrupted']);
export const isTerminal = (type) => TERMINAL.has(type);

function parts(message) {
  const list = (message && message.parts) || [];
  return list.map((part) => {
    if (part.type === 'text') return h('div', { class: 'text' }, part.text);
    if (part.type === 'data' && part.name === 'agentkeep.tool_call_request') {
      return h('div', { class: 'data' }, 'tool call request ', h('pre', null, json(part.data)));
    }
    return h('pre', { class: 'data' }, json(part));
  });
}

function args(value) {
  if (typeof value === 'string') {
    try { return json(JSON.parse(value)); } catch { return value; }
  }
  return json(value ?? {});
}

function textOf(list) {
  return (list || []).map((p) => (p.type === 'text' ? p.text : json(p))).join('\n');
}

function line(ev, ...children) {
  return h('div', { class: `line ${ev.type.replace(/\./g, '-')}` },
    h('span', { class: 'type' }, ev.type), ' ', children);
}

export function renderEvent(ev, calls) {
  const d = ev.data || {};
  let el;
  switch (ev.type) {
    case 'message': {
      const role = d.role || (d.message && d.message.role) || 'user';
      el = h('div', { class: `msg msg-${role}` },
        h('div', { class: 'who' }, role, d.reason ? ` (${d.reason})` : '',
          d.author ? ` from ${d.author.id || json(d.author)}` : ''),
        d.omitted ? h('div', { class: 'muted' }, `(too large: ${d.bytes} bytes)`) : parts(d.message));
      break;
    }
    case 'message.accepted':
      el = line(ev, `${d.delivery || 'send'} queued`, d.messageId ? ` · ${d.messageId}` : '');
      break;
    case 'assistant.block': {
      const block = d.block || {};
      if (block.type === 'tool_call') {
        calls.set(block.callId, block.name);
        el = h('div', { class: 'tool call' },
          h('div', { class: 'who' }, 'tool call ', h('code', null, block.name || '?'),
            h('span', { class: 'muted' }, ` · ${block.callId || ''}`)),
          h('pre', null, args(block.arguments)));
      } else if (block.type === 'reasoning' || block.type === 'thinking') {
        el = h('details', { class: 'reasoning' }, h('summary', null, 'reasoning'),
          h('div', { class: 'text' }, block.text || block.thinking || ''));
      } else if (block.type === 'text') {
        // Restated word for word by the assistant message that follows.
        el = h('div', { class: 'block-text', hidden: true }, block.text || '');
      } else {
        el = line(ev, h('pre', null, json(block)));
      }
      break;
    }
    case 'tool.batch':
      el = line(ev, `${(d.calls || []).length} call(s) dispatched`);
      break;
    case 'tool.result':
      el = h('div', { class: `tool result${d.isError ? ' error' : ''}` },
        h('div', { class: 'who' }, d.isError ? 'tool error ' : 'tool result ',
          h('code', null, calls.get(d.callId) || '?'), h('span', { class: 'muted' }, ` · ${d.callId || ''}`),
          d.ran === false ? ' (not run)' : ''),
        h('pre', null, textOf(d.parts)));
      break;
    case 'failure.note':
      el = h('div', { class: 'msg msg-failure' }, h('div', { class: 'who' }, 'failure'), parts(d.message));
      break;
    case 'response.end':
      el = line(ev, d.tokens ? `${d.tokens.input ?? '?'} in · ${d.tokens.output ?? '?'} out` : '');
      break;
    case 'settled':
      el = line(ev, 'nothing owed');
      break;
    default:
      if (ev.type.startsWith('turn.')) {
        el = line(ev, d.number ? `#${d.number} ` : '', d.status || '',
          d.error ? h('span', { class: 'error' }, ` ${d.error.code}: ${d.error.message}`) : '');
      } else {
        el = line(ev, h('code', { class: 'muted' }, JSON.stringify(d).slice(0, 300)));
      }
  }
  el.dataset.seq = ev.sequence;
  el.dataset.type = ev.type;
  if (ev.turnId) el.dataset.turn = ev.turnId;
  el.title = `#${ev.sequence} · ${ev.type} · ${when(ev.createdAt)}`;
  return el;
}
