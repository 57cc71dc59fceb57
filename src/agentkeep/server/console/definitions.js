// Definitions: the list with a create form; one definition with its edit form (a PATCH makes
// the next revision) and its revision history, each revision with what changed from the last.
import { api, all, enc } from './api.js';
import { changes } from './diff.js';
import { h, clear, link, when, json, errorBox } from './dom.js';

function field(label, input) {
  return h('label', { class: 'field' }, h('span', null, label), input);
}

function formValues(form) {
  const values = {};
  for (const el of form.elements) if (el.name) values[el.name] = el.value;
  return values;
}

function definitionFields(def) {
  return [
    field('Name', h('input', { name: 'name', value: def ? def.name : '' })),
    field('Model', h('input', {
      name: 'model', placeholder: 'provider/model, e.g. local/gym-1',
      value: def && def.model ? def.model.id : '',
    })),
    field('Description', h('input', { name: 'description', value: def ? def.description : '' })),
    field('Instructions', h('textarea', { name: 'instructions', rows: 4 },
      def ? def.instructions : '')),
  ];
}

export async function definitionsPage(view) {
  const agents = await all('/v1/agents', 'agents');
  const status = h('div', { class: 'status' });
  const form = h('form', { class: 'card', id: 'create-definition' },
    h('h2', null, 'New definition'),
    field('Id', h('input', { name: 'id', required: true, placeholder: 'lowercase id, e.g. helper' })),
    definitionFields(null),
    h('button', { type: 'submit' }, 'Create'),
    status);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const v = formValues(form);
    const body = { id: v.id.trim(), description: v.description, instructions: v.instructions };
    if (v.name.trim()) body.name = v.name.trim();
    if (v.model.trim()) body.model = { id: v.model.trim() };
    try {
      const created = await api('POST', '/v1/agents', body);
      location.hash = `#/definitions/${enc(created.id)}`;
    } catch (error) {
      clear(status).append(errorBox(error));
    }
  });
  const rows = agents.map((a) => h('tr', { dataset: { id: a.id } },
    h('td', null, link(a.id, 'definitions', a.id)),
    h('td', null, a.definition.name),
    h('td', null, a.definition.model ? a.definition.model.id : h('span', { class: 'muted' }, 'default')),
    h('td', { class: 'num' }, a.currentRevision),
    h('td', null, when(a.updatedAt))));
  clear(view).append(
    h('h1', null, 'Definitions'),
    agents.length === 0
      ? h('p', { class: 'muted' }, 'No definitions yet: create one below.')
      : h('table', { id: 'definitions' },
        h('thead', null, h('tr', null, ['Id', 'Name', 'Model', 'Revision', 'Updated'].map((t) => h('th', null, t)))),
        h('tbody', null, rows)),
    form);
}

function revisionItem(revision, previous) {
  const found = previous ? changes(previous.definition, revision.definition) : null;
  let body;
  if (!previous) body = h('p', { class: 'muted' }, 'Created.');
  else if (found.length === 0) body = h('p', { class: 'muted' }, 'No change.');
  else {
    body = h('ul', { class: 'changes' }, found.map((c) => h('li', { class: `change ${c.kind}` },
      h('code', null, c.path), ' ',
      c.kind === 'added' ? ['added ', h('span', { class: 'after' }, c.after)]
        : c.kind === 'removed' ? ['removed ', h('span', { class: 'before' }, c.before)]
          : [h('span', { class: 'before' }, c.before), ' → ', h('span', { class: 'after' }, c.after)])));
  }
  return h('li', { class: 'revision', dataset: { number: revision.number } },
    h('div', null, h('strong', null, `Revision ${revision.number}`), ' ',
      h('span', { class: 'muted' }, `${when(revision.createdAt)} · ${revision.hash.slice(0, 12)}`)),
    body);
}

export async function definitionPage(view, id) {
  const [record, revisions] = await Promise.all([
    api('GET', `/v1/agents/${enc(id)}`),
    all(`/v1/agents/${enc(id)}/revisions?limit=1000`, 'revisions'),
  ]);
  const def = record.definition;
  const status = h('div', { class: 'status' });
  const form = h('form', { class: 'card', id: 'edit-definition' },
    h('h2', null, 'Edit (saves a new revision)'), definitionFields(def),
    h('button', { type: 'submit' }, 'Save'), status);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const v = formValues(form);
    const patch = { name: v.name, description: v.description, instructions: v.instructions,
      model: v.model.trim() ? { id: v.model.trim() } : null };
    try {
      await api('PATCH', `/v1/agents/${enc(id)}`, patch);
      await definitionPage(view, id);
    } catch (error) {
      clear(status).append(errorBox(error));
    }
  });
  const start = h('button', { type: 'button', id: 'start-session' }, 'Start a session');
  start.addEventListener('click', async () => {
    try {
      const session = await api('POST', '/v1/sessions', { agentId: id });
      location.hash = `#/sessions/${enc(session.id)}`;
    } catch (error) {
      start.after(errorBox(error));
    }
  });
  const history = [...revisions].reverse().map((r) =>
    revisionItem(r, revisions.find((p) => p.number === r.number - 1)));
  clear(view).append(
    h('h1', null, def.name, ' ', h('span', { class: 'muted' }, `(${record.id})`)),
    h('p', null, `Revision ${record.currentRevision} · updated ${when(record.updatedAt)} · `,
      h('a', { href: `#/sessions?agent=${enc(id)}` }, 'its sessions'), ' ', start),
    h('div', { class: 'columns' },
      form,
      h('section', { class: 'card' }, h('h2', null, 'Revision history'),
        h('ol', { id: 'revisions', reversed: true }, history))),
    h('details', null, h('summary', null, 'Current definition (JSON)'), h('pre', null, json(def))));
}
