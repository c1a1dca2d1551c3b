"""Drives one scenario of scripts/perf-budget against a Larder running under callgrind.

    drive.py PID PROXY_PORT MAIN_PORT ORIGIN SCENARIO COUNT

Each scenario first makes what it measures (stores the entries its hits read, warms what the
measured requests must find warm, and checks a warm request is a hit), then zeroes callgrind's
counters, turns instrumentation on, sends COUNT requests on one keep-alive connection (checking
those of the first-sight, miss and batch scenarios are what they measure), and dumps the
counters; scripts/perf-budget divides the dump's total by COUNT.
"""

import http.client
import json
import subprocess
import sys

pid, proxy_port, main_port, origin, scenario, count = sys.argv[1:7]
count = int(count)


def connection(port):
    return http.client.HTTPConnection("127.0.0.1", int(port), timeout=600)


def request(conn, method, path, body=None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        sys.exit(f"perf-budget: {method} {path} answered {response.status}: {data[:200]!r}")
    return response, data


def proxy_get(conn, path):
    response, _ = request(conn, "GET", path)
    return response.getheader("Cache-Status") or ""


def fetch_body(path):
    return json.dumps({"url": f"{origin}{path}", "cache": {"ttl": 86400}})


def fetch(conn, path):
    response, _ = request(conn, "POST", "/fetch", fetch_body(path))
    return response.getheader("X-Cache") or ""


def batch_body(paths):
    return json.dumps({"requests": [json.loads(fetch_body(path)) for path in paths]})


def expect(what, got, want):
    if want not in got.lower():
        sys.exit(f"perf-budget: {scenario}: {what} answered '{got}', not {want}")


def callgrind(*arguments):
    subprocess.run(["callgrind_control", *arguments, pid], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def counted(send):
    callgrind("-z")
    callgrind("-i", "on")
    for index in range(count):
        send(index)
    callgrind("-d")
    callgrind("-i", "off")


proxy = connection(proxy_port)
main = connection(main_port)

if scenario == "fill":
    # Entries that the first-sight scenarios read from SQLite after a restart.
    for index in range(count):
        expect("a first request", proxy_get(proxy, f"/sight/{index}"), "stored")
        expect("a first /fetch", fetch(main, f"/fetch-sight/{index}"), "miss")
elif scenario == "proxy-hot-hit":
    for _ in range(50):
        proxy_get(proxy, "/hot")
    expect("a warm request", proxy_get(proxy, "/hot"), "hit")
    counted(lambda index: proxy_get(proxy, "/hot"))
elif scenario == "proxy-first-sight-hit":
    counted(lambda index: expect("a stored URL", proxy_get(proxy, f"/sight/{index}"), "hit"))
elif scenario == "fetch-hot-hit":
    for _ in range(50):
        fetch(main, "/fetch-hot")
    expect("a warm /fetch", fetch(main, "/fetch-hot"), "hit")
    counted(lambda index: fetch(main, "/fetch-hot"))
elif scenario == "fetch-first-sight-hit":
    counted(lambda index: expect("a stored /fetch", fetch(main, f"/fetch-sight/{index}"), "hit"))
elif scenario == "proxy-miss":
    counted(lambda index: expect("a new URL", proxy_get(proxy, f"/miss/{index}"), "stored"))
elif scenario == "batch-10-hits":
    paths = [f"/batch/{index}" for index in range(10)]
    for _ in range(20):
        request(main, "POST", "/batch", batch_body(paths))
    body = batch_body(paths)

    def send(index):
        _, data = request(main, "POST", "/batch", body)
        if data.count(b'"outcome":"hit"') != 10:
            sys.exit(f"perf-budget: batch-10-hits: not ten hits: {data[:300]!r}")

    counted(send)
else:
    sys.exit(f"perf-budget: no scenario {scenario}")
