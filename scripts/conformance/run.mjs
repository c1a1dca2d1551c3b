// Runs the public HTTP cache test suite (https://github.com/http-tests/cache-tests) against a
// cache, using the suite's own test engine and Node's global fetch (the suite's cli needs npm
// packages; this needs none). Prints every test that did not pass and a summary by kind
// ("required", "optimal", "check"); a test's dependencies are not consulted.
//
//   node scripts/conformance/run.mjs SUITE_DIR BASE_URL [TEST_ID]
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const [suiteDir, baseUrl, only] = process.argv.slice(2)
const load = (file) => import(pathToFileURL(path.join(suiteDir, file)).href)
const { runTests, getResults } = await load('test-engine/client/runner.mjs')
const suites = (await load('tests/index.mjs')).default
  .map(suite => ({ ...suite, tests: suite.tests.filter(test => !only || test.id === only) }))
  .filter(suite => suite.tests.length > 0)
if (only) suites.forEach(suite => suite.tests.forEach(test => { test.dump = true }))

// As a reverse proxy is tested, not a browser: browser-only tests are skipped by the runner.
// Older copies of the engine take the fetch function; current ones use the global fetch (and
// import undici only for the interim-response tests, which then fail without it).
if (runTests.length >= 4) {
  await runTests(suites, fetch, false, baseUrl)
} else {
  await runTests(suites, false, baseUrl)
}
const results = getResults()

const summary = {}
for (const suite of suites) {
  for (const test of suite.tests) {
    if (test.browser_only) continue
    const kind = test.kind || 'required'
    summary[kind] = summary[kind] || { pass: 0, fail: 0, setup: 0 }
    const result = results[test.id]
    if (result === true) {
      summary[kind].pass++
    } else {
      const [name, message] = result || ['Missing', 'no result']
      summary[kind][name === 'Setup' ? 'setup' : 'fail']++
      console.log(`${kind.padEnd(8)} ${name === 'Setup' ? 'SETUP' : 'FAIL '} ${test.id}: ${message}`)
    }
  }
}
for (const [kind, counts] of Object.entries(summary)) {
  const total = counts.pass + counts.fail + counts.setup
  console.log(`${kind}: ${counts.pass} of ${total} pass (${counts.fail} fail, ${counts.setup} setup failures)`)
}
