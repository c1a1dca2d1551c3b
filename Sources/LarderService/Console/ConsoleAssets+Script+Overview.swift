// The console's script, in four parts joined in order (ConsoleAssets.script): the overview page:
// the figures from /cache/stats, storage health and the hit-ratio chart.
// Plain JavaScript with no framework, edited here inside a raw string literal.

extension ConsoleAssets {
    static let overviewScript = #"""
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

          // The minutes before the page opened, as the server read its counters (a reading every few
          // seconds): the chart starts with them instead of empty. Readings older than the first
          // live one only; a server without the history leaves the chart to fill as before.
          async function loadHistory() {
            try {
              const history = await api('GET', '/cache/stats/history');
              const live = state.samples.length ? state.samples[0].at : Infinity;
              const past = (history.samples || [])
                .map((sample) => ({ at: Date.parse(sample.at), since: sample }))
                .filter((sample) => Number.isFinite(sample.at) && sample.at < live);
              state.samples = past.concat(state.samples).slice(-SAMPLES_KEPT);
              if (state.renderOverview) state.renderOverview();
            } catch (_) {
              // Not fatal: the live readings follow.
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
                  count(stored.expiredRemovals) + ' removed by expiry' +
                    (stored.evictionBacklog ? '; ' + count(stored.evictionBacklog) + ' still to delete' : '')),
                card('stat-health', 'Storage', state.health || '…', 'memory tier ' + bytes(stats.memoryTier.bytes) + ' of ' +
                  bytes(stats.memoryTier.capacityBytes)),
                card('stat-upstream-errors', 'Upstream errors', count(upstreamErrors.reduce((sum, [, n]) => sum + n, 0)),
                  upstreamErrors.map(([code, n]) => code + ' ' + n).join(', ') || 'none since start'));
              chart.replaceChildren(hitRatioChart());
              const admission = stored.admission;
              const admissionRows = admission
                ? Object.entries(admission).map(([name, value]) => h('tr', {}, h('td', {}, name), h('td', { class: 'num' }, count(value))))
                : [h('tr', {}, h('td', {}, 'not reported by this store'))];
              // A namespace with a budget (--namespace-max-bytes) shows it and what it evicted.
              const namespaceRows = Object.entries(stored.namespaces || {}).map(([name, figures]) =>
                h('tr', { class: 'namespace-row' }, h('td', {}, name), h('td', { class: 'num' }, count(figures.entries)),
                  h('td', { class: 'num' }, bytes(figures.bytes)),
                  h('td', { class: 'num' }, figures.maxBytes === undefined ? '–'
                    : bytes(figures.maxBytes) + ' (' + count(figures.evictions || 0) + ' evicted)')));
              const errorRows = errors.map(([code, n]) => h('tr', {}, h('td', {}, code), h('td', { class: 'num' }, count(n))));
              details.replaceChildren(
                h('div', { class: 'panel', id: 'admission' }, h('h3', {}, 'Admission (S3-FIFO)'),
                  h('table', {}, h('tbody', {}, admissionRows))),
                h('div', { class: 'panel' }, h('h3', {}, 'Namespaces'),
                  h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'namespace'), h('th', { class: 'num' }, 'entries'),
                    h('th', { class: 'num' }, 'bytes'), h('th', { class: 'num' }, 'budget'))), h('tbody', {}, namespaceRows)),
                  h('h3', {}, 'Errors since start'),
                  errorRows.length ? h('table', {}, h('tbody', {}, errorRows)) : h('p', { class: 'muted' }, 'none')));
            };
            state.renderOverview();
          }

          // The hit ratio of each interval between two stats reads (the server's past readings first):
          // (hits + stale + revalidated) over those and misses, as the server counts it; null where
          // nothing was asked.
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


        """#
}
