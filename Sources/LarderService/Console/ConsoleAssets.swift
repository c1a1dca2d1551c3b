// The console's files as string literals, compiled into the binary: SwiftPM resources are not
// embedded on Linux, and the console has no build step. The page is static: everything it shows
// is fetched by the script (ConsoleAssets+Script*.swift) from the admin API with the token, and
// put into the page as text nodes, never as markup. No inline script or style anywhere: the
// Content-Security-Policy (ConsoleRoute) forbids both.

enum ConsoleAssets {
    static let html = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Larder console</title>
        <link rel="stylesheet" href="/cache/console/app.css">
        <script src="/cache/console/app.js" defer></script>
        </head>
        <body>
        <header>
          <h1>Larder</h1>
          <nav id="nav" hidden>
            <a href="#overview" id="nav-overview">Overview</a>
            <a href="#entries" id="nav-entries">Entries</a>
            <a href="#actions" id="nav-actions">Actions</a>
          </nav>
          <button type="button" id="forget" hidden>Forget token</button>
        </header>
        <main>
          <section id="login" hidden>
            <h2>Admin token</h2>
            <p>The token is kept in this tab only (sessionStorage) and sent as
              <code>Authorization: Bearer</code> with each call to the admin API.</p>
            <form id="login-form">
              <label>Token <input type="password" id="token" autocomplete="off" spellcheck="false"></label>
              <button type="submit" id="login-submit">Open the console</button>
            </form>
            <p id="login-error" class="error"></p>
          </section>
          <section id="view" hidden></section>
        </main>
        <footer><p id="status" class="muted"></p></footer>
        </body>
        </html>

        """#

    static let style = #"""
        :root { --fg: #1d2329; --muted: #66707a; --line: #d7dce1; --accent: #0b6e4f; --bad: #b3261e; --bg: #f6f7f8; }
        * { box-sizing: border-box; }
        body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
        header { display: flex; align-items: center; gap: 24px; padding: 10px 24px; background: #fff;
          border-bottom: 1px solid var(--line); }
        header h1 { font-size: 18px; margin: 0; color: var(--accent); }
        nav { display: flex; gap: 4px; flex: 1; }
        nav a { padding: 6px 12px; border-radius: 6px; color: var(--fg); text-decoration: none; }
        nav a.current { background: var(--accent); color: #fff; }
        main { padding: 16px 24px; max-width: 1280px; }
        footer { padding: 0 24px 16px; }
        h2 { font-size: 17px; margin: 8px 0 12px; }
        h3 { font-size: 15px; margin: 16px 0 8px; }
        .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(210px, 1fr)); gap: 12px; }
        .card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
        .card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
        .card .value { font-size: 22px; font-weight: 600; }
        .card .detail { color: var(--muted); font-size: 12px; }
        .panel { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; margin-top: 12px; }
        meter, progress { width: 100%; height: 12px; }
        table { border-collapse: collapse; width: 100%; background: #fff; }
        th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
        th { font-size: 12px; color: var(--muted); font-weight: 600; }
        td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
        td.url { word-break: break-all; max-width: 520px; }
        tr.clickable { cursor: pointer; }
        tr.clickable:hover { background: #eef6f2; }
        form.filters { display: flex; flex-wrap: wrap; gap: 8px 12px; align-items: end; margin-bottom: 10px; }
        form.filters label, form.stack label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
        form.stack { display: flex; flex-wrap: wrap; gap: 8px 12px; align-items: end; }
        input, select, textarea { font: inherit; padding: 4px 6px; border: 1px solid var(--line); border-radius: 4px; background: #fff; }
        textarea { width: 100%; min-height: 70px; }
        button { font: inherit; padding: 5px 12px; border: 1px solid var(--accent); border-radius: 4px; background: var(--accent);
          color: #fff; cursor: pointer; }
        button.secondary { background: #fff; color: var(--accent); }
        button.danger { background: var(--bad); border-color: var(--bad); }
        button:disabled { opacity: .5; cursor: default; }
        .pager { display: flex; gap: 8px; align-items: center; margin-top: 8px; }
        .muted { color: var(--muted); }
        .error { color: var(--bad); white-space: pre-wrap; }
        .ok { color: var(--accent); }
        .confirm { border: 1px solid var(--bad); background: #fff4f3; border-radius: 6px; padding: 10px; margin-top: 8px; }
        pre { background: #0f1419; color: #e6e6e6; padding: 10px; border-radius: 6px; overflow: auto; max-height: 420px;
          white-space: pre-wrap; word-break: break-all; font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
        dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 0; }
        dl.facts dt { color: var(--muted); }
        dl.facts dd { margin: 0; word-break: break-all; }
        .tag { display: inline-block; background: #e6f0ec; color: var(--accent); border-radius: 10px; padding: 0 8px; margin: 0 4px 2px 0;
          font-size: 12px; }
        .freshness { font-size: 15px; font-weight: 600; }
        svg.chart { width: 100%; height: 160px; background: #fff; border: 1px solid var(--line); border-radius: 8px; }
        svg.chart .line { fill: none; stroke: var(--accent); stroke-width: 2; }
        svg.chart .dot { fill: var(--accent); }
        svg.chart .grid { stroke: var(--line); stroke-width: 1; }
        svg.chart text { fill: var(--muted); font-size: 11px; }
        .hidden { display: none; }
        .columns { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
        @media (max-width: 900px) { .columns { grid-template-columns: 1fr; } }

        """#
}
