// The console's script, in four parts joined in order (ConsoleAssets.script): the entries page and
// one entry: the listing with its filters and cursor, the freshness explained in words and the
// body preview.
// Plain JavaScript with no framework, edited here inside a raw string literal.

extension ConsoleAssets {
    static let entriesScript = #"""
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


        """#
}
