// The console's script (see ConsoleAssets.swift): the pages, the calls to the admin API with the
// token, the purge confirmations and the live figures, in plain JavaScript with no framework.
// Edited here, as JavaScript inside a raw string literal.

extension ConsoleAssets {
    static let script = #"""
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

          // MARK: Overview

          async function pollStats() {
            try {
              takeSample(await api('GET', '/cache/stats'));
              note('Updated ' + new Date().toLocaleTimeString('en-GB'));
            } catch (error) {
              if (error.status !== 401) note('Could not read /cache/stats: ' + error.message, 'error');
            }
            if (state.samples.length % 5 === 1) pollHealth();
          }

          async function pollHealth() {
            try {
              const response = await fetch('/healthz', { cache: 'no-store', credentials: 'omit' });
              state.health = (await response.json()).storage || 'unknown';
            } catch (_) {
              state.health = 'unreachable';
            }
          }

          function takeSample(stats) {
            state.stats = stats;
            state.samples.push({ at: Date.now(), since: stats.sinceStart });
            if (state.samples.length > SAMPLES_KEPT) state.samples.shift();
            if (state.renderOverview) state.renderOverview();
          }

          function card(id, label, value, detail, extra) {
            return h('div', { class: 'card', id },
              h('div', { class: 'label' }, label),
              h('div', { class: 'value' }, value),
              extra || null,
              detail ? h('div', { class: 'detail' }, detail) : null);
          }

          function showOverview(view) {
            const cards = h('div', { class: 'cards', id: 'overview-cards' });
            const chart = h('div', { id: 'hit-chart' });
            const details = h('div', { class: 'columns' });
            add(view, [h('h2', {}, 'Overview'), cards, h('h3', {}, 'Hit ratio over the last minutes'), chart, details]);
            state.renderOverview = () => {
              const stats = state.stats;
              if (!stats) return;
              const stored = stats.stored;
              const since = stats.sinceStart;
              const capacity = stored.capacityBytes;
              const meter = capacity ? h('meter', { min: 0, max: capacity, value: stored.bytes, high: capacity * 0.9 }) : null;
              const errors = Object.entries(since.errors || {});
              const upstreamErrors = errors.filter(([code]) => code.startsWith('upstream') || code === 'too_many_redirects');
              const recent = recentHitRatio();
              cards.replaceChildren(
                card('stat-entries', 'Entries', count(stored.entries),
                  Object.keys(stored.namespaces || {}).length + ' namespaces'),
                card('stat-bytes', 'Stored', bytes(stored.bytes),
                  capacity ? 'of ' + bytes(capacity) + ' (' + percent(stored.bytes / capacity) + ')' : 'no capacity set', meter),
                card('stat-hit-ratio', 'Hit ratio', percent(since.hitRatio),
                  'since start; last minute ' + percent(recent)),
                card('stat-requests', 'Requests', count(since.requests),
                  count(since.hits) + ' hits, ' + count(since.misses) + ' misses, ' + count(since.stale) + ' stale, ' +
                    count(since.coalesced) + ' coalesced'),
                card('stat-evictions', 'Evictions', count(stored.evictions),
                  count(stored.expiredRemovals) + ' removed by expiry'),
                card('stat-health', 'Storage', state.health || '…', 'memory tier ' + bytes(stats.memoryTier.bytes) + ' of ' +
                  bytes(stats.memoryTier.capacityBytes)),
                card('stat-upstream-errors', 'Upstream errors', count(upstreamErrors.reduce((sum, [, n]) => sum + n, 0)),
                  upstreamErrors.map(([code, n]) => code + ' ' + n).join(', ') || 'none since start'));
              chart.replaceChildren(hitRatioChart());
              const admission = stored.admission;
              const admissionRows = admission
                ? Object.entries(admission).map(([name, value]) => h('tr', {}, h('td', {}, name), h('td', { class: 'num' }, count(value))))
                : [h('tr', {}, h('td', {}, 'not reported by this store'))];
              const namespaceRows = Object.entries(stored.namespaces || {}).map(([name, figures]) =>
                h('tr', {}, h('td', {}, name), h('td', { class: 'num' }, count(figures.entries)),
                  h('td', { class: 'num' }, bytes(figures.bytes))));
              const errorRows = errors.map(([code, n]) => h('tr', {}, h('td', {}, code), h('td', { class: 'num' }, count(n))));
              details.replaceChildren(
                h('div', { class: 'panel', id: 'admission' }, h('h3', {}, 'Admission (S3-FIFO)'),
                  h('table', {}, h('tbody', {}, admissionRows))),
                h('div', { class: 'panel' }, h('h3', {}, 'Namespaces'),
                  h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'namespace'), h('th', { class: 'num' }, 'entries'),
                    h('th', { class: 'num' }, 'bytes'))), h('tbody', {}, namespaceRows)),
                  h('h3', {}, 'Errors since start'),
                  errorRows.length ? h('table', {}, h('tbody', {}, errorRows)) : h('p', { class: 'muted' }, 'none')));
            };
            state.renderOverview();
          }

          // The hit ratio of each interval between two stats reads: (hits + stale + revalidated) over
          // those and misses, as the server counts it; null where nothing was asked.
          function intervalRatios() {
            const points = [];
            for (let i = 1; i < state.samples.length; i += 1) {
              const a = state.samples[i - 1].since;
              const b = state.samples[i].since;
              const served = (b.hits - a.hits) + (b.stale - a.stale) + (b.revalidated - a.revalidated);
              const asked = served + (b.misses - a.misses);
              points.push({ at: state.samples[i].at, ratio: asked > 0 ? served / asked : null });
            }
            return points;
          }

          function recentHitRatio() {
            const recent = state.samples.filter((sample) => sample.at >= Date.now() - 60000);
            if (recent.length < 2) return null;
            const a = recent[0].since;
            const b = recent[recent.length - 1].since;
            const served = (b.hits - a.hits) + (b.stale - a.stale) + (b.revalidated - a.revalidated);
            const asked = served + (b.misses - a.misses);
            return asked > 0 ? served / asked : null;
          }

          function hitRatioChart() {
            const width = 800;
            const height = 160;
            const left = 40;
            const bottom = 20;
            const points = intervalRatios();
            const svg = s('svg', { class: 'chart', viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: 'none', role: 'img' });
            add(svg, s('title', {}, 'hit ratio between successive stats reads'));
            for (const level of [0, 0.5, 1]) {
              const y = (height - bottom) * (1 - level) + (level === 1 ? 4 : 0);
              add(svg, s('line', { class: 'grid', x1: left, x2: width, y1: y, y2: y }), s('text', { x: 4, y: y + 4 }, level * 100 + ' %'));
            }
            // From the oldest read kept (at most ten minutes back), and at least the last minute.
            const now = Date.now();
            const span = Math.max(60000, state.samples.length ? now - state.samples[0].at : 0);
            const x = (at) => left + ((at - (now - span)) / span) * (width - left);
            const y = (ratio) => 4 + (height - bottom - 4) * (1 - ratio);
            let run = [];
            const runs = [];
            for (const point of points) {
              if (point.ratio === null) {
                if (run.length) runs.push(run);
                run = [];
              } else {
                run.push(x(point.at).toFixed(1) + ',' + y(point.ratio).toFixed(1));
              }
            }
            if (run.length) runs.push(run);
            for (const line of runs) {
              add(svg, s('polyline', { class: 'line', points: line.length === 1 ? line[0] + ' ' + line[0] : line.join(' ') }));
              // A dot for each read, so a lone reading between two idle ones shows too.
              for (const point of line) {
                const [cx, cy] = point.split(',');
                add(svg, s('circle', { class: 'dot', cx, cy, r: 3 }));
              }
            }
            add(svg, s('text', { x: left, y: height - 4 }, duration(span / 1000) + ' ago'),
              s('text', { x: width - 30, y: height - 4 }, 'now'));
            if (!runs.length) add(svg, s('text', { x: width / 2 - 80, y: height / 2 }, 'no requests in this window yet'));
            return svg;
          }

          // MARK: Entries

          function showEntries(view) {
            const f = state.filters;
            const input = (name, label, props) =>
              h('label', {}, label, h('input', Object.assign({ name, id: 'filter-' + name, value: f[name] }, props || {})));
            const namespaces = h('datalist', { id: 'namespace-names' });
            const expired = h('select', { name: 'expired', id: 'filter-expired' },
              [['', 'any'], ['true', 'expired'], ['false', 'not expired']].map(([value, label]) =>
                h('option', { value, selected: f.expired === value }, label)));
            const limit = h('select', { name: 'limit', id: 'filter-limit' },
              ['25', '50', '100', '250', '1000'].map((value) => h('option', { value, selected: f.limit === value }, value)));
            const form = h('form', { class: 'filters', id: 'entries-filters' },
              input('namespace', 'namespace', { list: 'namespace-names' }), input('urlPrefix', 'URL prefix', { size: 36 }),
              input('host', 'host'), input('tag', 'tag'), input('status', 'status', { size: 5, inputmode: 'numeric' }),
              h('label', {}, 'expired', expired), h('label', {}, 'per page', limit),
              h('button', { type: 'submit', id: 'entries-apply' }, 'Apply'), namespaces);
            const table = h('div', { id: 'entries-table' });
            const pager = h('div', { class: 'pager' });
            add(view, h('h2', {}, 'Entries'), form, table, pager);
            form.addEventListener('submit', (event) => {
              event.preventDefault();
              for (const name of Object.keys(f)) f[name] = form.elements[name].value.trim();
              state.cursors = [null];
              load();
            });
            api('GET', '/cache/namespaces').then((answer) => {
              namespaces.replaceChildren(...answer.namespaces.map((ns) => h('option', { value: ns.name })));
            }, () => {});

            async function load() {
              const cursor = state.cursors[state.cursors.length - 1];
              const params = Object.assign({}, f, { cursor });
              let page;
              try {
                page = await api('GET', '/cache/entries?' + query(params));
              } catch (error) {
                return failure(table, error);
              }
              const rows = page.entries.map((entry) => {
                const row = h('tr', { class: 'clickable entry-row', 'data-key': entry.key, tabindex: 0 },
                  h('td', { class: 'url' }, entry.method + ' ' + entry.url),
                  h('td', {}, entry.namespace),
                  h('td', { class: 'num' }, entry.status),
                  h('td', { class: 'num' }, bytes(entry.bytes)),
                  h('td', {}, ago(entry.storedAt)),
                  h('td', {}, (Date.parse(entry.expiresAt) > Date.now() ? 'fresh, ends ' : 'expired ') + until(entry.expiresAt)),
                  h('td', { class: 'num' }, count(entry.hits)),
                  h('td', {}, entry.tags.map((tag) => h('span', { class: 'tag' }, tag))));
                const open = () => { location.hash = '#entry/' + encodeURIComponent(entry.key); };
                row.addEventListener('click', open);
                row.addEventListener('keydown', (event) => { if (event.key === 'Enter') open(); });
                return row;
              });
              table.replaceChildren(rows.length
                ? h('table', {},
                  h('thead', {}, h('tr', {}, ['request', 'namespace', 'status', 'size', 'stored', 'freshness', 'hits', 'tags']
                    .map((name) => h('th', { class: ['status', 'size', 'hits'].includes(name) ? 'num' : null }, name)))),
                  h('tbody', {}, rows))
                : h('p', { class: 'muted', id: 'entries-empty' }, 'No entry matches.'));
              const first = state.cursors.length < 2;
              const previous = h('button', { type: 'button', class: 'secondary', id: 'entries-previous', disabled: first }, 'Previous');
              const next = h('button', { type: 'button', class: 'secondary', id: 'entries-next', disabled: !page.nextCursor }, 'Next');
              previous.addEventListener('click', () => { state.cursors.pop(); load(); });
              next.addEventListener('click', () => { state.cursors.push(page.nextCursor); load(); });
              pager.replaceChildren(previous, h('span', { class: 'muted', id: 'entries-page' },
                'page ' + state.cursors.length + ', ' + rows.length + ' entries'), next);
            }
            load();
          }

          // MARK: One entry

          // The API path of a key: refused unless it is a key as /fetch reports it (a link's `..`
          // would otherwise climb out of /cache/entries/ once the browser resolves the path).
          function entryPath(key) {
            if (!/^[\x21-\x7e]{1,256}$/.test(key) || key.includes('/') || key === '.' || key === '..') {
              throw new ApiError(400, 'invalid_request', 'not a cache key: ' + key);
            }
            return '/cache/entries/' + encodeURIComponent(key);
          }

          async function showEntry(view, key) {
            add(view, h('p', {}, h('a', { href: '#entries' }, '← Entries')), h('h2', {}, 'Entry'));
            let answer;
            try {
              answer = await api('GET', entryPath(key) + '?body=true');
            } catch (error) {
              return add(view, h('p', { class: 'error', id: 'entry-error' },
                error.status === 404 ? 'No entry is stored under this key (purged or replaced).' : error.message));
            }
            const actions = h('div', { id: 'entry-actions' });
            const remove = h('button', { type: 'button', class: 'danger', id: 'entry-remove' }, 'Remove this entry');
            remove.addEventListener('click', () => confirmThen(actions,
              'Remove key ' + answer.key + ': ' + answer.variants.length + ' variant(s) will go.', 'Remove', async () => {
                await api('DELETE', entryPath(answer.key));
                return 'Removed.';
              }, () => { location.hash = '#entries'; }));
            add(view, h('p', { class: 'muted' }, 'key ', h('code', { id: 'entry-key' }, answer.key)), remove, actions);
            answer.variants.forEach((variant, index) => add(view, variantPanel(variant, index, answer.variants.length)));
          }

          function variantPanel(v, index, total) {
            const response = v.response || null;
            const headers = response ? Object.entries(response.headers || {}) : [];
            const facts = [
              ['request', v.method + ' ' + v.url], ['namespace', v.namespace], ['status', v.status], ['stored size', bytes(v.bytes)],
              ['stored', v.storedAt + ' (' + ago(v.storedAt) + ')'], ['fresh until', v.expiresAt + ' (' + until(v.expiresAt) + ')'],
              ['stale until', v.staleUntil + ' (' + until(v.staleUntil) + ')'], ['version', v.version],
              ['hits', count(v.hits) + ', last ' + ago(v.lastAccessAt)], ['ETag', v.etag || '—'],
              ['Last-Modified', v.lastModified || '—'], ['Vary', v.varies.length ? v.varies.join(', ') : '—'],
            ];
            if (v.variantKey) facts.unshift(['variant key', v.variantKey]);
            return h('div', { class: 'panel variant' },
              total > 1 ? h('h3', {}, 'Variant ' + (index + 1) + ' of ' + total) : null,
              h('p', { class: 'freshness' }, explainFreshness(v, headers, Date.now())),
              h('dl', { class: 'facts' }, facts.map(([name, value]) => [h('dt', {}, name), h('dd', {}, String(value))])),
              h('h3', {}, 'Tags'),
              v.tags.length
                ? h('p', { class: 'tags' }, v.tags.map((tag) => h('span', { class: 'tag' }, tag)))
                : h('p', { class: 'muted' }, 'none'),
              h('h3', {}, 'Response headers'),
              headers.length
                ? h('table', { class: 'headers' }, h('tbody', {}, headers.map(([name, value]) =>
                  h('tr', {}, h('th', {}, name), h('td', { class: 'header-value' }, value)))))
                : h('p', { class: 'muted' }, 'not available'),
              h('h3', {}, 'Body'),
              response ? bodyPreview(response) : h('p', { class: 'muted' }, 'not available (the body could not be read)'));
          }

          // "fresh for 41 min: max-age=3600 from the origin", from the lifetime the entry was stored
          // under (expiresAt − storedAt) and the response's own fields.
          function explainFreshness(v, headers, now) {
            const storedAt = Date.parse(v.storedAt);
            const expiresAt = Date.parse(v.expiresAt);
            const staleUntil = Date.parse(v.staleUntil);
            const lifetime = (expiresAt - storedAt) / 1000;
            const source = freshnessSource(headers, lifetime);
            const validators = v.etag || v.lastModified;
            if (now < expiresAt) return 'fresh for ' + duration((expiresAt - now) / 1000) + ': ' + source;
            const stale = 'stale for ' + duration((now - expiresAt) / 1000);
            if (now < staleUntil) {
              return stale + ', may still be served stale for ' + duration((staleUntil - now) / 1000) +
                ' (stale-while-revalidate, stale-if-error): ' + source;
            }
            return stale + ' (' + source + '); the next request ' +
              (validators ? 'revalidates it with its ' + (v.etag ? 'ETag' : 'Last-Modified') : 'fetches it again') +
              ', unless it asks for stale (cache-else-load, cache-only) or gives a longer ttl';
          }

          function freshnessSource(headers, lifetime) {
            const field = (name) => (headers.find(([n]) => n.toLowerCase() === name) || [])[1];
            const directives = {};
            for (const part of (field('cache-control') || '').split(',')) {
              const [name, value] = part.trim().split('=');
              if (name) directives[name.toLowerCase()] = value === undefined ? true : value.replace(/"/g, '');
            }
            const life = duration(lifetime);
            if (lifetime <= 0) {
              if (directives['no-cache']) return 'no-cache from the origin: stale at once, revalidated before each use';
              return 'stored with no freshness (stale at once): served only by cache-else-load, cache-only or a caller\'s ttl';
            }
            for (const name of ['s-maxage', 'max-age']) {
              const seconds = Number(directives[name]);
              if (directives[name] !== undefined && Number.isFinite(seconds)) {
                if (Math.abs(seconds - lifetime) <= 1) return name + '=' + seconds + ' from the origin';
                if (lifetime < seconds) {
                  return name + '=' + seconds + ' from the origin, less the ' + duration(seconds - lifetime) + ' it was old on arrival';
                }
                return 'a lifetime of ' + life + ' from the caller\'s cache.ttl (the origin said ' + name + '=' + seconds + ')';
              }
            }
            if (field('expires')) return 'Expires from the origin (' + field('expires') + '): a lifetime of ' + life;
            if (field('last-modified')) {
              return 'a lifetime of ' + life + ': the caller\'s cache.ttl, or a tenth of the age of Last-Modified';
            }
            return 'a lifetime of ' + life + ' from the caller\'s cache.ttl';
          }

          function bodyPreview(response) {
            let text;
            let kind;
            let size;
            if (Object.prototype.hasOwnProperty.call(response, 'body')) {
              text = JSON.stringify(response.body, null, 2);
              size = new TextEncoder().encode(JSON.stringify(response.body)).length;
              kind = 'JSON, pretty-printed';
            } else if (Object.prototype.hasOwnProperty.call(response, 'bodyText')) {
              text = response.bodyText;
              size = new TextEncoder().encode(text).length;
              kind = 'text';
              try {
                const type = Object.entries(response.headers || {}).find(([n]) => n.toLowerCase() === 'content-type');
                if (type && /json/i.test(type[1])) {
                  text = JSON.stringify(JSON.parse(text), null, 2);
                  kind = 'JSON, pretty-printed';
                }
              } catch (_) {
                kind = 'text';
              }
            } else if (Object.prototype.hasOwnProperty.call(response, 'bodyBase64')) {
              const raw = atob(response.bodyBase64);
              size = raw.length;
              text = hexDump(raw, PREVIEW_HEX_BYTES);
              kind = 'binary, hex';
              if (raw.length > PREVIEW_HEX_BYTES) text += '\n… ' + count(raw.length - PREVIEW_HEX_BYTES) + ' more bytes not shown';
            } else {
              text = '';
              size = 0;
              kind = 'empty';
            }
            if (text.length > PREVIEW_CHARS) {
              text = text.slice(0, PREVIEW_CHARS) + '\n… ' + count(text.length - PREVIEW_CHARS) + ' more characters not shown';
            }
            return [h('p', { class: 'muted' }, kind + ', ' + bytes(size)), h('pre', { class: 'body-preview' }, text)];
          }

          function hexDump(raw, limit) {
            const lines = [];
            for (let offset = 0; offset < Math.min(raw.length, limit); offset += 16) {
              const chunk = raw.slice(offset, Math.min(offset + 16, limit));
              const hex = Array.from(chunk, (c) => c.charCodeAt(0).toString(16).padStart(2, '0')).join(' ');
              const ascii = Array.from(chunk, (c) => (c.charCodeAt(0) >= 0x20 && c.charCodeAt(0) < 0x7f ? c : '.')).join('');
              lines.push(offset.toString(16).padStart(8, '0') + '  ' + hex.padEnd(48) + '  ' + ascii);
            }
            return lines.join('\n');
          }

          // MARK: Actions

          // Shows `message` with a confirm button in `holder`; on confirm runs `act` and shows what it
          // returns, then `after`.
          function confirmThen(holder, message, label, act, after) {
            const yes = h('button', { type: 'button', class: 'danger confirm-yes' }, label);
            const no = h('button', { type: 'button', class: 'secondary confirm-no' }, 'Cancel');
            const result = h('p', { class: 'confirm-result' });
            yes.addEventListener('click', async () => {
              yes.disabled = true;
              no.disabled = true;
              try {
                const done = await act();
                holder.replaceChildren(h('p', { class: 'ok action-result' }, done));
                if (after) after();
              } catch (error) {
                result.className = 'error confirm-result';
                result.textContent = error.message;
                no.disabled = false;
              }
            });
            no.addEventListener('click', () => holder.replaceChildren());
            holder.replaceChildren(h('div', { class: 'confirm' }, h('p', { class: 'confirm-message' }, message), yes, ' ', no, result));
          }

          // Counts what a purge with the same filter would remove, through the listing (the API has no
          // dry run): every page of up to 1,000, with the filters the listing lacks (olderThan,
          // versionBelow, an exact URL) applied here.
          async function countListed(params, keep) {
            let cursor = null;
            let pages = 0;
            const found = { entries: 0, bytes: 0, keys: new Set(), complete: true };
            do {
              const page = await api('GET', '/cache/entries?' + query(Object.assign({}, params, { limit: 1000, cursor })));
              for (const entry of page.entries) {
                if (keep && !keep(entry)) continue;
                found.entries += 1;
                found.bytes += entry.bytes;
                found.keys.add(entry.key);
              }
              cursor = page.nextCursor;
              pages += 1;
            } while (cursor && pages < COUNT_PAGES_MAX);
            found.complete = !cursor;
            return found;
          }

          function countText(found) {
            const n = (found.complete ? '' : 'more than ') + count(found.entries);
            const keys = count(found.keys.size) + (found.keys.size === 1 ? ' key' : ' keys');
            return n + ' entr' + (found.entries === 1 ? 'y' : 'ies') + ' (' + bytes(found.bytes) + ', ' + keys + ')';
          }

          function removedText(answer) {
            return 'Removed ' + count(answer.removed) + ' entr' + (answer.removed === 1 ? 'y' : 'ies') + ' (' + bytes(answer.bytes) + ').';
          }

          function section(id, title, ...children) {
            return h('div', { class: 'panel', id }, h('h3', {}, title), children);
          }

          function field(name, label, props) {
            return h('label', {}, label, h('input', Object.assign({ name }, props || {})));
          }

          function showActions(view) {
            add(view, h('h2', {}, 'Actions'), h('p', { class: 'muted' },
              'Each purge first counts, through the listing, what it would remove, and asks before it goes. ' +
              'Entries still waiting in memory for admission are not listed, and go too.'));
            add(view, h('div', { class: 'columns' }, purgeByFilter(), h('div', {}, purgeByTag(), purgeByURL(), removeOne())));
            add(view, namespacesPanel(), warmPanel());
          }

          function purgeByFilter() {
            const confirm = h('div');
            const form = h('form', { class: 'stack', id: 'purge-filter-form' },
              field('namespace', 'namespace'), field('urlPrefix', 'URL prefix', { size: 32 }), field('host', 'host'), field('tag', 'tag'),
              field('olderThan', 'older than (s)', { size: 7, inputmode: 'numeric' }),
              field('versionBelow', 'version below', { size: 7, inputmode: 'numeric' }),
              h('label', {}, 'expired',
                h('select', { name: 'expired' }, h('option', { value: '' }, 'any'), h('option', { value: 'true' }, 'expired'))),
              h('button', { type: 'submit', id: 'purge-filter-count' }, 'Count and purge…'));
            form.addEventListener('submit', async (event) => {
              event.preventDefault();
              const v = (name) => form.elements[name].value.trim();
              const filter = {
                namespace: v('namespace'), urlPrefix: v('urlPrefix'), host: v('host'), tag: v('tag'), expired: v('expired'),
              };
              const olderThan = v('olderThan');
              const versionBelow = v('versionBelow');
              const purge = Object.assign({}, filter, { olderThan, versionBelow });
              if (!query(purge)) return failure(confirm, new Error('Give at least one filter.'));
              const cutoff = Date.now() - Number(olderThan) * 1000;
              const keep = (entry) =>
                (!olderThan || Date.parse(entry.storedAt) < cutoff) && (!versionBelow || entry.version < Number(versionBelow));
              try {
                const found = await countListed(filter, keep);
                confirmThen(confirm, 'This purge will remove ' + countText(found) + '.', 'Purge',
                  async () => removedText(await api('DELETE', '/cache?' + query(purge))));
              } catch (error) {
                failure(confirm, error);
              }
            });
            return section('purge-filter', 'Purge by filter', form, confirm);
          }

          function purgeByTag() {
            const confirm = h('div');
            const form = h('form', { class: 'stack', id: 'purge-tag-form' }, field('tag', 'tag', { required: true }),
              h('button', { type: 'submit' }, 'Count and purge…'));
            form.addEventListener('submit', async (event) => {
              event.preventDefault();
              const tag = form.elements.tag.value.trim();
              try {
                const found = await countListed({ tag });
                confirmThen(confirm, 'Purging tag ' + tag + ' will remove ' + countText(found) + '.', 'Purge',
                  async () => removedText(await api('POST', '/cache/purge', { tags: [tag] })));
              } catch (error) {
                failure(confirm, error);
              }
            });
            return section('purge-tag', 'Purge by tag', form, confirm);
          }

          function purgeByURL() {
            const confirm = h('div');
            const form = h('form', { id: 'purge-url-form' },
              h('label', { class: 'muted' }, 'URLs, one a line (every namespace)', h('textarea', { name: 'urls', spellcheck: 'false' })),
              h('button', { type: 'submit' }, 'Count and purge…'));
            form.addEventListener('submit', async (event) => {
              event.preventDefault();
              const urls = form.elements.urls.value.split('\n').map((line) => line.trim()).filter(Boolean);
              if (!urls.length) return failure(confirm, new Error('Give at least one URL.'));
              try {
                const total = { entries: 0, bytes: 0, keys: new Set(), complete: true };
                for (const url of urls) {
                  const found = await countListed({ urlPrefix: url }, (entry) => entry.url === url);
                  total.entries += found.entries;
                  total.bytes += found.bytes;
                  found.keys.forEach((key) => total.keys.add(key));
                  total.complete = total.complete && found.complete;
                }
                confirmThen(confirm, 'Purging ' + urls.length + ' URL(s) will remove ' + countText(total) +
                  ' (counted by the URL as written; the purge also matches its normalised form).', 'Purge',
                  async () => removedText(await api('POST', '/cache/purge', { urls })));
              } catch (error) {
                failure(confirm, error);
              }
            });
            return section('purge-url', 'Purge by URL', form, confirm);
          }

          function removeOne() {
            const confirm = h('div');
            const form = h('form', { class: 'stack', id: 'remove-key-form' }, field('key', 'key', { size: 40, required: true }),
              h('button', { type: 'submit' }, 'Look up and remove…'));
            form.addEventListener('submit', async (event) => {
              event.preventDefault();
              const key = form.elements.key.value.trim();
              try {
                const entry = await api('GET', entryPath(key));
                const first = entry.variants[0];
                confirmThen(confirm, 'Remove ' + first.method + ' ' + first.url + ': ' + entry.variants.length + ' variant(s) will go.',
                  'Remove', async () => {
                    await api('DELETE', entryPath(key));
                    return 'Removed.';
                  });
              } catch (error) {
                failure(confirm, error.status === 404 ? new Error('No entry is stored under this key.') : error);
              }
            });
            return section('remove-key', 'Remove one entry', form, confirm);
          }

          function namespacesPanel() {
            const table = h('div');
            const confirm = h('div');
            async function load() {
              try {
                const answer = await api('GET', '/cache/namespaces');
                table.replaceChildren(h('table', {},
                  h('thead', {}, h('tr', {}, ['namespace', 'entries', 'bytes', 'version', ''].map((name) => h('th', {}, name)))),
                  h('tbody', {}, answer.namespaces.map((ns) => {
                    const bump = h('button', { type: 'button', class: 'secondary namespace-bump' }, 'Bump');
                    bump.addEventListener('click', () => confirmThen(confirm,
                      'Bump namespace ' + ns.name + ' from version ' + ns.version + ' to ' + (ns.version + 1) + ': its ' +
                        count(ns.entries) + ' entries are never served again and are removed in the background.', 'Bump',
                      async () => {
                        const done = await api('POST', '/cache/namespaces/' + encodeURIComponent(ns.name) + '/version', { bump: true });
                        return 'Namespace ' + done.namespace + ' is at version ' + done.version + ' (was ' + done.previous + ').';
                      }, load));
                    return h('tr', {}, h('td', {}, ns.name), h('td', { class: 'num' }, count(ns.entries)),
                      h('td', { class: 'num' }, bytes(ns.bytes)), h('td', { class: 'num' }, ns.version), h('td', {}, bump));
                  }))));
              } catch (error) {
                failure(table, error);
              }
            }
            load();
            return section('namespaces', 'Namespace versions', table, confirm);
          }

          function warmPanel() {
            const jobs = h('div', { id: 'warm-jobs' });
            const message = h('div');
            const form = h('form', { id: 'warm-form' },
              h('label', { class: 'muted' }, 'URLs to fetch and store, one a line', h('textarea', { name: 'urls', spellcheck: 'false' })),
              h('div', { class: 'stack' }, field('ttl', 'ttl (s)', { size: 8, inputmode: 'numeric' }),
                field('namespace', 'namespace'), field('concurrency', 'concurrency', { size: 4, value: 4, inputmode: 'numeric' }),
                h('button', { type: 'submit' }, 'Start warming')));
            form.addEventListener('submit', async (event) => {
              event.preventDefault();
              const v = (name) => form.elements[name].value.trim();
              const urls = v('urls').split('\n').map((line) => line.trim()).filter(Boolean);
              const cache = {};
              if (v('ttl')) cache.ttl = Number(v('ttl'));
              if (v('namespace')) cache.namespace = v('namespace');
              const body = { urls, concurrency: Number(v('concurrency') || 4) };
              if (Object.keys(cache).length) body.cache = cache;
              try {
                const started = await api('POST', '/cache/warm', body);
                message.replaceChildren(h('p', { class: 'ok' }, 'Started job ' + started.job + ' (' + started.total + ' requests).'));
                load();
              } catch (error) {
                failure(message, error);
              }
            });
            async function load() {
              let answer;
              try {
                answer = await api('GET', '/cache/warm');
              } catch (error) {
                return failure(jobs, error);
              }
              const list = answer.jobs.slice().sort((a, b) => Date.parse(b.createdAt) - Date.parse(a.createdAt));
              jobs.replaceChildren(list.length
                ? h('table', {}, h('thead', {}, h('tr', {}, ['job', 'state', 'progress', 'done', 'failed', 'stored', 'bytes', 'created', '']
                  .map((name) => h('th', {}, name)))), h('tbody', {}, list.map((job) => {
                  const live = job.state === 'queued' || job.state === 'running';
                  const cancel = live ? h('button', { type: 'button', class: 'danger warm-cancel' }, 'Cancel') : null;
                  if (cancel) {
                    cancel.addEventListener('click', async () => {
                      cancel.disabled = true;
                      try {
                        await api('DELETE', '/cache/warm/' + encodeURIComponent(job.job));
                      } catch (error) {
                        failure(message, error);
                      }
                      load();
                    });
                  }
                  const errors = (job.errors || []).map((e) => e.url + ': ' + e.code).join('\n');
                  return h('tr', { class: 'warm-job', 'data-state': job.state },
                    h('td', {}, h('code', {}, job.job)), h('td', { class: 'warm-state' }, job.state),
                    h('td', {}, h('progress', { max: Math.max(job.total, 1), value: job.done + job.failed }),
                      h('span', { class: 'muted' }, count(job.done + job.failed) + ' of ' + count(job.total))),
                    h('td', { class: 'num' }, count(job.done)), h('td', { class: 'num', title: errors || null }, count(job.failed)),
                    h('td', { class: 'num' }, count(job.stored)),
                    h('td', { class: 'num' }, bytes(job.bytes) + (job.bytesExpected ? ' of ' + bytes(job.bytesExpected) : '')),
                    h('td', {}, ago(job.createdAt)), h('td', {}, cancel));
                })))
                : h('p', { class: 'muted' }, 'No warm jobs.'));
            }
            load();
            state.viewTimer = setInterval(load, WARM_EVERY_MS);
            return section('warm', 'Warm jobs', form, message, jobs);
          }

          if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
          else start();
        })();

        """#
}
