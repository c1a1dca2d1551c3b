// The console's script, in four parts joined in order (`script`, below): the setup, the DOM
// helpers (always as text), formatting, the admin API with the token, signing in and out, and the
// page routing. It opens the function the other parts continue.
// Plain JavaScript with no framework, edited here inside a raw string literal.

extension ConsoleAssets {
    /// The whole script: the parts below, joined (one function scope, so each part calls the
    /// others' functions).
    static let script = coreScript + overviewScript + entriesScript + actionsScript

    static let coreScript = #"""
        // Larder console. No framework, no build step. Every value from the cache is put into the page
        // as text (textContent, text nodes, attribute values through setAttribute), never as markup:
        // entry URLs, headers and bodies are chosen by origins. The admin token is kept in this tab's
        // sessionStorage and sent only as an Authorization header, never in a URL.
        'use strict';

        (function () {
          const TOKEN_KEY = 'larder.console.token';
          const STATS_EVERY_MS = 2000;
          const WARM_EVERY_MS = 1000;
          const SAMPLES_KEPT = 300; // ten minutes of stats reads
          const PREVIEW_CHARS = 64 * 1024;
          const PREVIEW_HEX_BYTES = 4096;
          const COUNT_PAGES_MAX = 100; // counting before a purge reads at most 100 pages of 1,000

          const state = {
            token: sessionStorage.getItem(TOKEN_KEY),
            samples: [],
            stats: null,
            health: null,
            statsTimer: null,
            historyLoaded: false,
            viewTimer: null,
            renderOverview: null,
            filters: { namespace: '', urlPrefix: '', host: '', tag: '', status: '', expired: '', limit: '50' },
            cursors: [null],
          };

          // MARK: DOM, always as text

          function h(tag, props, ...children) {
            const node = document.createElement(tag);
            setProps(node, props);
            add(node, children);
            return node;
          }

          function setProps(node, props) {
            for (const [name, value] of Object.entries(props || {})) {
              if (value === null || value === undefined || value === false) continue;
              if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
              else if (name === 'text') node.textContent = String(value);
              else node.setAttribute(name === 'className' ? 'class' : name, value === true ? '' : String(value));
            }
          }

          function add(node, ...children) {
            for (const child of children.flat(Infinity)) {
              if (child === null || child === undefined || child === false) continue;
              node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
            }
            return node;
          }

          const SVG = 'http://www.w3.org/2000/svg';
          function s(tag, props, ...children) {
            const node = document.createElementNS(SVG, tag);
            setProps(node, props);
            add(node, children);
            return node;
          }

          const $ = (id) => document.getElementById(id);

          // MARK: Formatting

          function bytes(n) {
            if (n === null || n === undefined) return '—';
            const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
            let value = n;
            let unit = 0;
            while (value >= 1024 && unit < units.length - 1) {
              value /= 1024;
              unit += 1;
            }
            return (unit === 0 ? String(value) : value.toFixed(value < 10 ? 2 : 1)) + ' ' + units[unit];
          }

          function duration(seconds) {
            const sec = Math.max(0, Math.round(seconds));
            if (sec < 90) return sec + ' s';
            const min = Math.round(sec / 60);
            if (min < 90) return min + ' min';
            const hours = sec / 3600;
            if (hours < 48) return (hours < 10 ? hours.toFixed(1) : Math.round(hours)) + ' h';
            return Math.round(hours / 24) + ' d';
          }

          function percent(ratio) {
            return ratio === null || ratio === undefined || Number.isNaN(ratio) ? '—' : (ratio * 100).toFixed(1) + ' %';
          }

          function count(n) {
            return n === null || n === undefined ? '—' : Number(n).toLocaleString('en');
          }

          function ago(time) {
            const at = Date.parse(time);
            if (Number.isNaN(at)) return '—';
            const delta = (Date.now() - at) / 1000;
            return delta >= 0 ? duration(delta) + ' ago' : 'in ' + duration(-delta);
          }

          function until(time) {
            const at = Date.parse(time);
            if (Number.isNaN(at)) return '—';
            const delta = (at - Date.now()) / 1000;
            return delta >= 0 ? 'in ' + duration(delta) : duration(-delta) + ' ago';
          }

          // MARK: The admin API, with the token as a Bearer header

          class ApiError extends Error {
            constructor(status, code, message) {
              super(message || 'HTTP ' + status);
              this.status = status;
              this.code = code;
            }
          }

          async function api(method, path, body) {
            const headers = { Accept: 'application/json' };
            if (state.token) headers.Authorization = 'Bearer ' + state.token;
            const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
            if (body !== undefined) {
              headers['Content-Type'] = 'application/json';
              init.body = JSON.stringify(body);
            }
            const response = await fetch(path, init);
            const text = await response.text();
            let json = null;
            try {
              json = text ? JSON.parse(text) : null;
            } catch (_) {
              json = null;
            }
            if (response.status === 401) {
              signOut(state.token ? 'The admin token was refused: type it again.' : 'This Larder asks for its admin token.');
              throw new ApiError(401, 'unauthorized', 'the admin token was refused');
            }
            if (!response.ok) {
              const error = json && json.error ? json.error : {};
              throw new ApiError(response.status, error.code, (error.code ? error.code + ': ' : '') + (error.message || text));
            }
            return json;
          }

          function query(params) {
            const q = new URLSearchParams();
            for (const [name, value] of Object.entries(params)) {
              if (value !== '' && value !== null && value !== undefined) q.set(name, String(value));
            }
            return q.toString();
          }

          function note(text, kind) {
            const status = $('status');
            status.textContent = text;
            status.className = kind || 'muted';
          }

          function failure(holder, error) {
            holder.replaceChildren(h('p', { class: 'error' }, String(error.message || error)));
          }

          // MARK: Signing in and out

          async function start() {
            $('login-form').addEventListener('submit', async (event) => {
              event.preventDefault();
              const typed = $('token').value;
              $('token').value = '';
              state.token = typed;
              sessionStorage.setItem(TOKEN_KEY, typed);
              $('login-error').textContent = '';
              if (await probe()) enter();
            });
            $('forget').addEventListener('click', () => signOut('Token forgotten.'));
            window.addEventListener('hashchange', route);
            if (await probe()) enter();
          }

          // True when the admin API answers with the token held (or without one, when none is set).
          async function probe() {
            try {
              takeSample(await api('GET', '/cache/stats'));
              return true;
            } catch (error) {
              if (error.status !== 401) showLogin(String(error.message || error));
              return false;
            }
          }

          function enter() {
            $('login').hidden = true;
            $('nav').hidden = false;
            $('forget').hidden = !state.token;
            $('view').hidden = false;
            if (!state.statsTimer) state.statsTimer = setInterval(pollStats, STATS_EVERY_MS);
            if (!state.historyLoaded) {
              state.historyLoaded = true;
              loadHistory();
            }
            pollHealth();
            route();
          }

          function showLogin(message) {
            $('login').hidden = false;
            $('nav').hidden = true;
            $('forget').hidden = true;
            $('view').hidden = true;
            $('view').replaceChildren();
            $('login-error').textContent = message || '';
            $('token').focus();
          }

          function signOut(reason) {
            sessionStorage.removeItem(TOKEN_KEY);
            state.token = null;
            clearInterval(state.statsTimer);
            state.statsTimer = null;
            clearInterval(state.viewTimer);
            state.viewTimer = null;
            showLogin(reason);
          }

          // MARK: Pages

          function route() {
            clearInterval(state.viewTimer);
            state.viewTimer = null;
            state.renderOverview = null;
            let hash = '';
            try {
              hash = decodeURIComponent(location.hash.slice(1));
            } catch (_) {
              hash = 'overview';
            }
            const page = hash.startsWith('entry/') ? 'entries' : hash || 'overview';
            for (const name of ['overview', 'entries', 'actions']) {
              $('nav-' + name).className = name === page ? 'current' : '';
            }
            const view = $('view');
            view.replaceChildren();
            view.setAttribute('data-page', hash.startsWith('entry/') ? 'entry' : page);
            if (hash.startsWith('entry/')) showEntry(view, hash.slice('entry/'.length));
            else if (page === 'entries') showEntries(view);
            else if (page === 'actions') showActions(view);
            else showOverview(view);
          }


        """#
}
