// Sessions: every session (archived ones included), filtered by definition and status.
import { all, enc } from './api.js';
import { h, clear, link, when } from './dom.js';

export async function sessionsPage(view, params) {
  const agent = params.get('agent') || '';
  const status = params.get('status') || 'active';
  const [sessions, agents] = await Promise.all([
    all(`/v1/sessions?include_archived=true${agent ? `&agent_id=${enc(agent)}` : ''}`, 'sessions'),
    all('/v1/agents', 'agents'),
  ]);
  const shown = sessions.filter((s) => status === 'all' || s.status === status);
  const go = () => {
    const q = new URLSearchParams();
    if (agentSelect.value) q.set('agent', agentSelect.value);
    q.set('status', statusSelect.value);
    location.hash = `#/sessions?${q}`;
  };
  const agentSelect = h('select', { id: 'filter-agent', onchange: go },
    h('option', { value: '' }, 'every definition'),
    agents.map((a) => h('option', { value: a.id, selected: a.id === agent }, a.id)));
  const statusSelect = h('select', { id: 'filter-status', onchange: go },
    ['active', 'archived', 'all'].map((s) => h('option', { value: s, selected: s === status }, s)));
  clear(view).append(
    h('h1', null, 'Sessions'),
    h('div', { class: 'filters' }, h('label', null, 'Definition ', agentSelect),
      h('label', null, 'Status ', statusSelect),
      h('span', { class: 'muted' }, `${shown.length} of ${sessions.length}`)),
    shown.length === 0 ? h('p', { class: 'muted' }, 'No sessions match.')
      : h('table', { id: 'sessions' },
        h('thead', null, h('tr', null, ['Session', 'Definition', 'Revision', 'Status', 'Created', 'Updated'].map((t) => h('th', null, t)))),
        h('tbody', null, shown.map((s) => h('tr', { dataset: { id: s.id } },
          h('td', null, link(s.id, 'sessions', s.id)),
          h('td', null, s.agentId ? link(s.agentId, 'definitions', s.agentId) : h('span', { class: 'muted' }, 'none')),
          h('td', { class: 'num' }, s.agentRevision ?? ''),
          h('td', null, h('span', { class: `badge ${s.status}` }, s.status)),
          h('td', null, when(s.createdAt)),
          h('td', null, when(s.updatedAt)))))));
}
