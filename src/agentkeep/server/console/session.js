// One session, live: the ledger paged in (1000 events a request, each page rendered as it
// arrives), then the SSE stream from the last sequence, with text deltas streamed into a
// provisional bubble that the turn's assistant message replaces. Every durable event is
// rendered once: an event at or below the last rendered sequence is ignored (a reconnect
// resumes with Last-Event-ID, which the browser sends by itself).
import { api, enc } from './api.js';
import { h, clear, link, errorBox } from './dom.js';
import { renderEvent, isTerminal } from './ledger.js';

const PAGE = 1000;

export function sessionPage(view, id) {
  const state = { last: 0, duplicates: 0, open: new Set(), calls: new Map(), streams: new Map(), source: null, closed: false };
  const log = h('div', { id: 'log', class: 'log', 'aria-live': 'polite' });
  const badge = h('span', { id: 'session-status', class: 'badge' }, '…');
  const turnBadge = h('span', { id: 'turn-status', class: 'badge idle' }, 'idle');
  const counter = h('span', { id: 'event-count', class: 'muted' }, '');
  const notice = h('div', { class: 'status' });
  const input = h('textarea', { id: 'message', rows: 3, placeholder: 'Write a message… (Ctrl+Enter sends)' });
  const send = h('button', { type: 'submit', id: 'send' }, 'Send');
  const cancel = h('button', { type: 'button', id: 'cancel', disabled: true }, 'Cancel turn');
  const archive = h('button', { type: 'button', id: 'archive', class: 'danger' }, 'Archive');
  const definition = h('span');
  const composer = h('form', { id: 'composer', class: 'composer' }, input, h('div', null, send));

  function refresh() {
    const running = state.open.size > 0;
    cancel.disabled = !running;
    turnBadge.textContent = running ? 'turn running' : 'idle';
    turnBadge.className = `badge ${running ? 'running' : 'idle'}`;
    counter.textContent = `${state.last} events`;
  }

  function atBottom() {
    return log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  }

  function note(ev) {
    if (ev.type.startsWith('turn.') && ev.turnId) {
      if (isTerminal(ev.type)) {
        state.open.delete(ev.turnId);
        dropStreams();
      } else {
        state.open.add(ev.turnId);
      }
    }
    if (ev.type === 'message' && ev.data && ev.data.role === 'assistant') dropStreams();
  }

  // A session runs one turn at a time: its assistant message or its end replaces whatever
  // streamed (a delta may name no turn).
  function dropStreams() {
    for (const bubble of state.streams.values()) bubble.remove();
    state.streams.clear();
  }

  // Durable events in sequence order; returns the elements to add.
  function build(events) {
    const fragment = document.createDocumentFragment();
    for (const ev of events) {
      if (ev.sequence <= state.last) { // seen already: never rendered twice (and counted)
        state.duplicates += 1;
        view.dataset.duplicates = String(state.duplicates);
        continue;
      }
      note(ev);
      fragment.append(renderEvent(ev, state.calls));
      state.last = ev.sequence;
    }
    return fragment;
  }

  function delta(ev) {
    if (ev.turnId && !state.open.has(ev.turnId)) return; // a late delta of an ended turn
    const key = ev.turnId || '';
    let bubble = state.streams.get(key);
    if (!bubble) {
      bubble = h('div', { class: 'msg msg-assistant streaming', dataset: { streaming: key } },
        h('div', { class: 'who' }, 'assistant (streaming)'), h('div', { class: 'text' }));
      state.streams.set(key, bubble);
      log.append(bubble);
    }
    bubble.lastChild.append(document.createTextNode(ev.data.text || ''));
  }

  function connect() {
    if (state.closed) return;
    const source = new EventSource(`/v1/sessions/${enc(id)}/events/stream?after=${state.last}`);
    state.source = source;
    source.onmessage = (message) => {
      const ev = JSON.parse(message.data);
      const stick = atBottom();
      if (ev.sequence === 0) delta(ev);
      else {
        const fragment = build([ev]);
        // Keep provisional streaming bubbles last.
        const first = state.streams.values().next().value;
        if (first) log.insertBefore(fragment, first); else log.append(fragment);
      }
      refresh();
      if (stick) log.scrollTop = log.scrollHeight;
    };
    source.onopen = () => { view.dataset.live = 'open'; clear(notice); };
    source.onerror = () => {
      view.dataset.live = 'reconnecting';
      if (source.readyState === EventSource.CLOSED && !state.closed) {
        // The browser gave up (a refusal, a restart): start again from the last sequence.
        setTimeout(retry, 1000);
      }
    };
  }

  // Reconnect once the daemon answers again; a 401 stops here (the sign-in page shows).
  async function retry() {
    if (state.closed) return;
    try {
      await api('GET', `/v1/sessions/${enc(id)}`);
    } catch (error) {
      if (error.status === 401) return;
      if (error.status === undefined) { setTimeout(retry, 1000); return; }
    }
    connect();
  }

  async function load() {
    const started = performance.now();
    const session = await api('GET', `/v1/sessions/${enc(id)}`);
    badge.textContent = session.status;
    badge.className = `badge ${session.status}`;
    if (session.agentId) definition.append('definition ', link(session.agentId, 'definitions', session.agentId), ` r${session.agentRevision}`);
    for (;;) {
      const page = await api('GET', `/v1/sessions/${enc(id)}/events?after=${state.last}&limit=${PAGE}`);
      log.append(build(page.events));
      refresh();
      if (page.nextAfter === null || page.nextAfter === undefined) break;
    }
    log.scrollTop = log.scrollHeight;
    view.dataset.loadMs = String(Math.round(performance.now() - started));
    view.dataset.loaded = 'true';
    if (session.status === 'archived') archived();
    connect();
  }

  function archived() {
    badge.textContent = 'archived';
    badge.className = 'badge archived';
    input.disabled = true; send.disabled = true; archive.disabled = true;
  }

  async function act(work) {
    clear(notice);
    try { await work(); } catch (error) { notice.append(errorBox(error)); }
  }

  composer.addEventListener('submit', (event) => {
    event.preventDefault();
    const text = input.value;
    if (!text.trim()) return;
    act(async () => {
      send.disabled = true;
      try {
        await api('POST', `/v1/sessions/${enc(id)}/messages`, { message: text, wait: false });
        input.value = '';
      } finally { send.disabled = false; }
    });
  });
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) composer.requestSubmit();
  });
  cancel.addEventListener('click', () => act(() => api('POST', `/v1/sessions/${enc(id)}/cancel`, {})));
  archive.addEventListener('click', () => act(async () => {
    await api('DELETE', `/v1/sessions/${enc(id)}`);
    archived();
  }));

  clear(view).append(
    h('div', { class: 'session-head' },
      h('h1', null, 'Session ', h('code', null, id)),
      h('div', { class: 'meta' }, badge, ' ', turnBadge, ' ', definition, ' ', counter),
      h('div', { class: 'actions' }, cancel, ' ', archive)),
    notice, log, composer);
  load().catch((error) => notice.append(errorBox(error)));
  return () => {
    state.closed = true;
    if (state.source) state.source.close();
  };
}
