// The session report (`agentkeep session export ID --html`): one page built from the JSON in
// #report-data, with the console's renderer (dom.js, ledger.js: inlined before this file in
// one classic script). Every text goes through a Text node; nothing is fetched.
import { h, json, when } from './dom.js';
import { renderEvent, isTerminal } from './ledger.js';

const CONVERSATION = new Set(['message', 'assistant.block', 'tool.result', 'failure.note']);

function millis(a, b) {
  if (!a || !b) return null;
  return Date.parse(b) - Date.parse(a);
}

function span(a, b) {
  const d = millis(a, b);
  if (d === null || isNaN(d)) return '';
  return d < 1000 ? `${d} ms` : `${(d / 1000).toFixed(2)} s`;
}

const isAssistantMessage = (ev) => ev.type === 'message' && ev.data && ev.data.role === 'assistant';

// The provider requests, rebuilt from the ledger: a response is the assistant blocks (and its
// assistant message) ending with `response.end`; what it was sent is every conversation fact
// committed before it began (a compaction replaces what it summarised). A block appended for a
// user's tool-call request is no response: a tool batch follows it before any response.end.
export function inferences(events) {
  const found = [];
  let context = [];
  let current = null;
  let previous = null;
  const open = (ev) => ({ due: previous, blocks: [], input: context.slice(), turnId: ev.turnId, end: null });
  for (const ev of events) {
    if ((ev.type === 'tool.batch' || ev.type === 'tool.result') && current) current = null;
    if (ev.type === 'assistant.block' || isAssistantMessage(ev)) {
      if (!current) current = open(ev);
      current.blocks.push(ev);
    } else if (ev.type === 'response.end') {
      if (!current) current = open(ev);
      current.end = ev;
      found.push(current);
      current = null;
    }
    if (ev.type === 'compaction') context = [ev];
    else if (CONVERSATION.has(ev.type) && !isAssistantMessage(ev)) context.push(ev);
    previous = ev;
  }
  if (current) found.push(current); // cut: no response.end
  return found;
}

function tokensOf(inf) {
  const t = (inf.end && inf.end.data && inf.end.data.tokens) || null;
  return t ? `${t.input ?? '?'} in · ${t.output ?? '?'} out` : 'no token counts';
}

function stopOf(inf) {
  if (!inf.end) return 'none (the response was cut: no response.end)';
  const calls = inf.blocks.some((b) => b.type === 'assistant.block' && b.data.block && b.data.block.type === 'tool_call');
  return calls ? 'tool_call' : 'end_turn';
}

// An event of a request's input: the console's rendering, with the model's own earlier text
// blocks shown (the console hides them behind the assistant message that restates them).
function inputEvent(ev, calls) {
  const block = ev.type === 'assistant.block' && ev.data.block;
  if (block && block.type === 'text') {
    return h('div', { class: 'msg msg-assistant', dataset: { seq: ev.sequence } },
      h('div', { class: 'who' }, 'assistant'), h('div', { class: 'text' }, block.text || ''));
  }
  if (ev.type === 'compaction') {
    return h('div', { class: 'line', dataset: { seq: ev.sequence } },
      `compaction: records through position ${ev.data.throughPosition} replaced by a summary`);
  }
  return renderEvent(ev, calls);
}

function kv(rows) {
  return h('table', { class: 'kv' }, rows.filter((r) => r[1] !== '' && r[1] !== null && r[1] !== undefined)
    .map(([k, v]) => h('tr', null, h('th', null, k), h('td', null, v))));
}

// What came back: the response's blocks (its assistant message only restates their text).
function received(inf) {
  const blocks = inf.blocks.filter((ev) => ev.type === 'assistant.block');
  return blocks.length ? blocks : inf.blocks;
}

function request(inf, index, calls, setup) {
  const first = inf.blocks[0];
  const end = inf.end;
  return h('details', { class: 'request card', dataset: { inference: index } },
    h('summary', null, h('strong', null, `Request ${index}`), ' · ',
      span(inf.due && inf.due.createdAt, end && end.createdAt) || '?', ' · ', tokensOf(inf), ' · stop: ', stopOf(inf)),
    kv([
      ['due (the commit that made it due)', inf.due ? `#${inf.due.sequence} ${inf.due.type} at ${when(inf.due.createdAt)}` : ''],
      ['first block', first ? `#${first.sequence} at ${when(first.createdAt)} (+${span(inf.due && inf.due.createdAt, first.createdAt)})` : ''],
      ['ended (response.end)', end ? `#${end.sequence} at ${when(end.createdAt)}` : 'not ended'],
      ['duration', span(inf.due && inf.due.createdAt, end && end.createdAt)],
      ['tokens', tokensOf(inf)],
      ['stop reason (derived from its blocks)', stopOf(inf)],
    ]),
    h('section', { class: 'sent' }, h('h3', null, 'Sent to the model'),
      setup,
      h('div', { class: 'muted' }, `${inf.input.length} conversation fact(s)`),
      h('div', { class: 'log report-log' }, inf.input.map((ev) => inputEvent(ev, calls)))),
    h('section', { class: 'received' }, h('h3', null, 'Came back'),
      h('div', { class: 'log report-log' }, received(inf).map((ev) => inputEvent(ev, calls)))));
}

function setupNote() {
  const def = (data.revision || data.definition || {}).definition;
  const settings = (data.runtime && data.runtime.settings) || {};
  const rows = [
    ['provider / model', `${settings.provider || '(default)'} / ${settings.model || '(default)'}`],
  ];
  if (def) {
    const shown = data.revision ? data.revision.number : data.definition.currentRevision;
    rows.push(['definition', `${data.session.agentId} (pinned: revision ${data.session.agentRevision ?? '?'}; ` +
      `shown: revision ${shown})`]);
    rows.push(['instructions (the definition)', def.instructions ?? '']);
    for (const key of ['model', 'toolbox', 'resources', 'workspace']) {
      if (def[key]) rows.push([`${key} (the definition)`, json(def[key])]);
    }
  }
  return h('details', { class: 'setup' },
    h('summary', null, 'instructions and tools in effect'),
    kv(rows),
    h('p', { class: 'muted' }, 'Requests are not stored as sent: this is the conversation the durable ' +
      'state records before the response, with the session\'s settings and definition; the instructions ' +
      'the agent\'s features added at the time are not recorded.'));
}

function summary(turns, infs, events) {
  const tokens = infs.reduce((acc, inf) => {
    const t = inf.end && inf.end.data.tokens;
    if (t) { acc.input += t.input || 0; acc.output += t.output || 0; }
    return acc;
  }, { input: 0, output: 0 });
  const calls = events.filter((e) => e.type === 'assistant.block' && e.data.block && e.data.block.type === 'tool_call').length;
  const settings = (data.runtime && data.runtime.settings) || {};
  const s = data.session;
  return h('table', { class: 'summary' },
    h('tr', null, ['session', 'definition', 'model', 'status', 'turns', 'requests', 'tool calls',
      'tokens in', 'tokens out', 'duration'].map((k) => h('th', null, k))),
    h('tr', null, [s.id, s.agentId ? `${s.agentId} r${s.agentRevision}` : '(none)',
      `${settings.provider || '?'} / ${settings.model || '?'}`, s.status, turns.length, infs.length, calls,
      tokens.input, tokens.output,
      span(events[0] && events[0].createdAt, events.length ? events[events.length - 1].createdAt : null)]
      .map((v) => h('td', null, String(v)))));
}

function turnSection(turn, events, infs, calls) {
  const running = events.find((e) => e.type === 'turn.running');
  const ended = events.find((e) => isTerminal(e.type));
  const title = turn ? `Turn ${turn.number} · ${turn.status}` : 'Outside any turn';
  const start = (turn && turn.startedAt) || (running && running.createdAt);
  const stop = (turn && turn.completedAt) || (ended && ended.createdAt);
  const setup = setupNote();
  return h('section', { class: 'turn card', dataset: { turn: turn ? turn.id : '' } },
    h('h2', null, title),
    turn ? kv([
      ['id', turn.id],
      ['queued', when(turn.createdAt)],
      ['started', when(start)],
      ['ended', when(stop)],
      ['duration', span(start, stop)],
      ['error', turn.error ? `${turn.error.code}: ${turn.error.message}` : ''],
    ]) : null,
    h('h3', null, 'Conversation'),
    h('div', { class: 'log report-log conversation' }, events.map((ev) => renderEvent(ev, calls))),
    infs.length ? h('h3', null, `Provider requests (${infs.length})`) : null,
    infs.map((inf) => request(inf, inf.index, calls, setup.cloneNode(true))));
}

const data = JSON.parse(document.getElementById('report-data').textContent);

function render() {
  const root = document.getElementById('report');
  while (root.firstChild) root.firstChild.remove();
  const events = data.events || [];
  const turns = data.turns || [];
  const infs = inferences(events);
  infs.forEach((inf, i) => { inf.index = i + 1; });
  const calls = new Map();
  const title = data.session.metadata && data.session.metadata.title;
  root.append(
    h('h1', null, `Session ${data.session.id}`, title ? ` · ${title}` : ''),
    h('p', { class: 'muted' }, `agentkeep session report · created ${when(data.session.createdAt)} · ` +
      `${events.length} ledger events`),
    summary(turns, infs, events),
    setupNote());
  // Sections in ledger order: one per turn, and one per run of events outside any turn.
  const known = new Map(turns.map((t) => [t.id, t]));
  const sections = [];
  const byTurn = new Map();
  let loose = null;
  for (const ev of events) {
    if (ev.turnId && known.has(ev.turnId)) {
      loose = null;
      if (!byTurn.has(ev.turnId)) {
        byTurn.set(ev.turnId, { turn: known.get(ev.turnId), events: [] });
        sections.push(byTurn.get(ev.turnId));
      }
      byTurn.get(ev.turnId).events.push(ev);
    } else {
      if (!loose) { loose = { turn: null, events: [] }; sections.push(loose); }
      loose.events.push(ev);
    }
  }
  for (const turn of turns) if (!byTurn.has(turn.id)) sections.push({ turn, events: [] });
  for (const { turn, events: own } of sections) {
    const seqs = new Set(own.map((e) => e.sequence));
    const mine = infs.filter((i) => seqs.has((i.end || i.blocks[0]).sequence));
    root.append(turnSection(turn, own, mine, calls));
  }
  root.append(
    h('details', { class: 'card' }, h('summary', null, 'What the runtime holds (model settings, owed work)'),
      h('pre', null, json(data.runtime))),
    h('details', { class: 'card' }, h('summary', null, `The whole ledger as JSON (${events.length} events)`),
      h('pre', { class: 'ledger-json' }, json(events))));
  root.dataset.loaded = 'true';
}

render();
