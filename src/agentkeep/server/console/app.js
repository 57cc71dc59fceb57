// The console's router: the page lives in the URL's hash, so the address stays on "/" and
// never carries a credential.
import { whenSignedOut } from './api.js';
import { h, clear, errorBox } from './dom.js';
import { definitionsPage, definitionPage } from './definitions.js';
import { sessionsPage } from './sessions.js';
import { sessionPage } from './session.js';

const view = document.getElementById('view');
let cleanup = null;

function signedOut() {
  if (cleanup) cleanup();
  cleanup = null;
  document.body.dataset.signedOut = 'true';
  document.getElementById('signout').hidden = true;
  clear(view).append(h('section', { class: 'narrow', id: 'signin-needed' },
    h('h1', null, 'Sign in'),
    h('p', null, 'Open the one-time sign-in link that ', h('code', null, 'agentkeep serve'),
      ' printed when it started (it works once, for five minutes).'),
    h('p', null, 'Used it already? Ask the daemon for another with its token:'),
    h('pre', null, 'curl -s -X POST -H "Authorization: Bearer $(cat STATE/daemon.token)" \\\n  '
      + location.origin + '/v1/console/links'),
    h('p', null, 'and open ', h('code', null, location.origin), ' followed by the path it answers.')));
}
whenSignedOut(signedOut);

async function route() {
  if (cleanup) cleanup();
  cleanup = null;
  const hash = location.hash.replace(/^#\/?/, '');
  const [pathPart, query = ''] = hash.split('?');
  const parts = pathPart.split('/').filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query);
  for (const a of document.querySelectorAll('[data-nav]')) {
    a.classList.toggle('active', a.dataset.nav === (parts[0] || 'definitions'));
  }
  delete view.dataset.loaded;
  try {
    if (parts[0] === 'sessions' && parts[1]) {
      cleanup = sessionPage(view, parts[1]);
      document.title = `agentkeep · ${parts[1]}`;
    } else if (parts[0] === 'sessions') {
      await sessionsPage(view, params);
      document.title = 'agentkeep · sessions';
      view.dataset.loaded = 'true';
    } else if (parts[0] === 'definitions' && parts[1]) {
      await definitionPage(view, parts[1]);
      document.title = `agentkeep · ${parts[1]}`;
      view.dataset.loaded = 'true';
    } else {
      await definitionsPage(view);
      document.title = 'agentkeep · definitions';
      view.dataset.loaded = 'true';
    }
  } catch (error) {
    if (error.status !== 401) clear(view).append(errorBox(error));
  }
}

document.getElementById('signout').addEventListener('click', async () => {
  await fetch('/console/signout', { method: 'POST', headers: { 'x-agentkeep-console': '1' } });
  signedOut();
});
window.addEventListener('hashchange', route);
route();
