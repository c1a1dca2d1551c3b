// The console's script, in four parts joined in order (ConsoleAssets.script): the actions page:
// purges counted and confirmed, namespace bumps and warm jobs; it closes the function the core
// part opens and starts the console.
// Plain JavaScript with no framework, edited here inside a raw string literal.

extension ConsoleAssets {
    static let actionsScript = #"""
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
            if (answer.invalidated) {
              return 'Marked ' + count(answer.invalidated) + ' entr' + (answer.invalidated === 1 ? 'y' : 'ies') +
                ' stale: each is revalidated on its next request.';
            }
            return 'Removed ' + count(answer.removed) + ' entr' + (answer.removed === 1 ? 'y' : 'ies') + ' (' + bytes(answer.bytes) + ').';
          }

          // A soft purge marks entries stale instead of removing them: revalidated on their next
          // request (a 304 keeps the body), and their stale windows still answer an origin outage.
          function softField() {
            return h('label', { class: 'muted' },
              h('input', { type: 'checkbox', name: 'soft' }), ' soft (mark stale, keep for revalidation)');
          }

          function verb(form) {
            return form.elements.soft.checked ? 'mark stale' : 'remove';
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
              softField(),
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
              const soft = form.elements.soft.checked ? 'true' : '';
              if (!query(purge)) return failure(confirm, new Error('Give at least one filter.'));
              const cutoff = Date.now() - Number(olderThan) * 1000;
              const keep = (entry) =>
                (!olderThan || Date.parse(entry.storedAt) < cutoff) && (!versionBelow || entry.version < Number(versionBelow));
              try {
                const found = await countListed(filter, keep);
                confirmThen(confirm, 'This purge will ' + verb(form) + ' ' + countText(found) + '.', 'Purge',
                  async () => removedText(await api('DELETE', '/cache?' + query(Object.assign({}, purge, { soft })))));
              } catch (error) {
                failure(confirm, error);
              }
            });
            return section('purge-filter', 'Purge by filter', form, confirm);
          }

          function purgeByTag() {
            const confirm = h('div');
            const form = h('form', { class: 'stack', id: 'purge-tag-form' }, field('tag', 'tag', { required: true }), softField(),
              h('button', { type: 'submit' }, 'Count and purge…'));
            form.addEventListener('submit', async (event) => {
              event.preventDefault();
              const tag = form.elements.tag.value.trim();
              try {
                const found = await countListed({ tag });
                const soft = form.elements.soft.checked;
                confirmThen(confirm, 'Purging tag ' + tag + ' will ' + verb(form) + ' ' + countText(found) + '.', 'Purge',
                  async () => removedText(await api('POST', '/cache/purge', soft ? { tags: [tag], soft } : { tags: [tag] })));
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
              softField(),
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
                const soft = form.elements.soft.checked;
                confirmThen(confirm, 'Purging ' + urls.length + ' URL(s) will ' + verb(form) + ' ' + countText(total) +
                  ' (counted by the URL as written; the purge also matches its normalised form).', 'Purge',
                  async () => removedText(await api('POST', '/cache/purge', soft ? { urls, soft } : { urls })));
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
              // The first page: the newest jobs, newest first.
              const list = answer.jobs;
              const more = answer.nextCursor ? h('p', { class: 'muted' }, 'The newest ' + count(list.length) + ' jobs.') : null;
              jobs.replaceChildren(list.length
                ? h('table', {}, h('thead', {}, h('tr', {}, ['job', 'state', 'progress', 'done', 'failed', 'stored', 'bytes', 'created', '']
                  .map((name) => h('th', {}, name)))), h('tbody', {}, list.map((job) => {
                  // DELETE cancels a live job (it stays, cancelled) and removes a finished one.
                  const live = job.state === 'queued' || job.state === 'running';
                  const action = live
                    ? h('button', { type: 'button', class: 'danger warm-cancel' }, 'Cancel')
                    : h('button', { type: 'button', class: 'warm-remove' }, 'Remove');
                  action.addEventListener('click', async () => {
                    action.disabled = true;
                    try {
                      await api('DELETE', '/cache/warm/' + encodeURIComponent(job.job));
                    } catch (error) {
                      failure(message, error);
                    }
                    load();
                  });
                  const errors = (job.errors || []).map((e) => e.url + ': ' + e.code).join('\n');
                  return h('tr', { class: 'warm-job', 'data-state': job.state },
                    h('td', {}, h('code', {}, job.job)), h('td', { class: 'warm-state' }, job.state),
                    h('td', {}, h('progress', { max: Math.max(job.total, 1), value: job.done + job.failed }),
                      h('span', { class: 'muted' }, count(job.done + job.failed) + ' of ' + count(job.total))),
                    h('td', { class: 'num' }, count(job.done)), h('td', { class: 'num', title: errors || null }, count(job.failed)),
                    h('td', { class: 'num' }, count(job.stored)),
                    h('td', { class: 'num' }, bytes(job.bytes) + (job.bytesExpected ? ' of ' + bytes(job.bytesExpected) : '')),
                    h('td', {}, ago(job.createdAt)), h('td', {}, action));
                })))
                : h('p', { class: 'muted' }, 'No warm jobs.'), ...(more ? [more] : []));
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
