"""A soak of Larder under mixed traffic while the origin injects faults (scripts/soak).

The origin (in this process, raw sockets, keep-alive) serves:
  /ok/ID?size=N       a body whose first 64 bytes are the SHA-256 (hex) of the rest, so any
                      answer can be checked without knowing what was asked; cacheable for 5 s
  /slow/ID?size=N     the same, sent in pieces with pauses (completes within the timeout)
  /fault/reset/ID     the connection closed without an answer       -> upstream_unreachable
  /fault/hang/ID      no answer for 45 s, past every upstream timeout -> upstream_timeout
  /fault/500/ID       500 Internal Server Error                       -> the origin's 500, passed on
  /fault/truncated/ID Content-Length larger than the body, then close -> upstream_error
Clients (threads, one keep-alive connection each) send /fetch (GET, and POST with ttl),
/proxy, /batch and purges. Every answer is checked against what its path asks for. Larder's
RSS (anonymous), open fds, threads and WAL size, with glibc's heap (in use, free), the memory tier and the
request memos from /metrics, are sampled every 10 s and printed as a table; the run fails on a
crash, an unanswered request, a wrong body, an error code that does not match the injected
fault, or growth after warm-up."""
import argparse
import hashlib
import http.client
import json
import os
import random
import socket
import socketserver
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit, parse_qs

REQUEST_TIMEOUT_MS = 5000  # /fetch and /batch items
HANG_SECONDS = 45           # past that and past /proxy's default upstream timeout (30 s)
CLIENT_TIMEOUT_SECONDS = 60


def payload_for(ident, size):
    seed = hashlib.sha256(ident.encode()).digest()
    rest = (seed * (size // len(seed) + 1))[:size]
    rest = bytes(48 + (b % 75) for b in rest)  # printable ASCII, so /fetch returns it as bodyText
    return hashlib.sha256(rest).hexdigest().encode() + rest


def body_is_whole(body):
    return len(body) >= 64 and hashlib.sha256(body[64:]).hexdigest().encode() == body[:64]


class Origin(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class OriginHandler(socketserver.BaseRequestHandler):
    def handle(self):
        conn = self.request
        conn.settimeout(60)
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                while len(buffer) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                buffer = buffer[length:]
                if not self.answer(conn, method, target):
                    return
        except (OSError, ValueError):
            return

    def answer(self, conn, method, target):
        parts = urlsplit(target)
        segments = parts.path.strip("/").split("/")
        size = int(parse_qs(parts.query).get("size", ["1000"])[0])
        kind = segments[0] if segments else ""
        if kind == "fault":
            fault = segments[1]
            if fault == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                return False
            if fault == "hang":
                time.sleep(HANG_SECONDS)
                return False
            if fault == "500":
                body = b"origin failure"
                conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s" % (len(body), body))
                return True
            if fault == "truncated":
                body = payload_for(parts.path, size)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n" % len(body) + body[: len(body) // 2])
                return False
        body = payload_for(parts.path, size)
        head = (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\nCache-Control: max-age=5\r\n"
                b"ETag: \"%s\"\r\n\r\n" % (len(body), body[:16]))
        if method == "HEAD":
            conn.sendall(head)
        elif kind == "slow":
            conn.sendall(head)
            for start in range(0, len(body), max(1, len(body) // 4)):
                time.sleep(0.05)
                conn.sendall(body[start:start + max(1, len(body) // 4)])
        else:
            conn.sendall(head + body)
        return True


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.problems = {}

    def add(self, key, problem=None):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if problem and len(self.problems.setdefault(key, [])) < 3:
                self.problems[key].append(problem)


EXPECTED_CODE = {"reset": {"upstream_unreachable", "upstream_error"}, "hang": {"upstream_timeout"},
                 "truncated": {"upstream_error"}}


def pick_path(rng, distinct):
    roll = rng.random()
    ident = rng.randrange(distinct)
    size = rng.choice([200, 2_000, 20_000, 120_000, 400_000])
    if roll < 0.70:
        return f"/ok/{ident}?size={size}"
    if roll < 0.78:
        return f"/slow/{ident}?size={size}"
    fault = rng.choice(["reset", "hang", "500", "truncated"])
    return f"/fault/{fault}/{ident}?size={size}"


def check_fetch_result(result, path, tally, route):
    """`result` is a /fetch answer (or one /batch item): status plus bodyText, or an error."""
    fault = path.split("/")[2] if path.startswith("/fault/") else None
    error = result.get("error")
    if error is not None:
        code = error.get("code") if isinstance(error, dict) else None
        if fault in EXPECTED_CODE and code in EXPECTED_CODE[fault]:
            return tally.add(f"{route} {code} (injected {fault})")
        return tally.add(f"{route} unexpected error", f"{route} {path}: unexpected error {error}")
    status = result.get("status")
    if fault == "500":
        if status == 500:
            return tally.add(f"{route} 500 passed on (injected 500)")
        return tally.add(f"{route} wrong status", f"{route} {path}: expected the origin's 500, got {status}")
    if fault is not None:
        return tally.add(f"{route} fault answered as success", f"{route} {path}: injected {fault} answered {status}")
    text = result.get("bodyText")
    if status != 200 or text is None or not body_is_whole(text.encode()):
        return tally.add(f"{route} wrong body", f"{route} {path}: status {status}, body {str(text)[:80]!r}")
    tally.add(f"{route} ok")


def client(port, origin, deadline, seed, distinct, tally):
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_SECONDS)

    def call(method, target, body=None):
        nonlocal conn
        try:
            conn.request(method, target, body=body, headers={"Content-Type": "application/json"} if body else {})
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as error:
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_SECONDS)
            tally.add("unanswered", f"{method} {target}: no answer ({error!r})")
            return None, None

    while time.time() < deadline:
        roll = rng.random()
        path = pick_path(rng, distinct)
        if roll < 0.45:
            spec = {"url": origin + path, "timeoutMs": REQUEST_TIMEOUT_MS}
            status, body = call("POST", "/fetch", json.dumps(spec))
            if status is not None:
                check_fetch_result(json.loads(body), path, tally, "fetch")
        elif roll < 0.55:
            spec = {"url": origin + path, "method": "POST", "body": {"q": path}, "cache": {"ttl": 5}, "timeoutMs": REQUEST_TIMEOUT_MS}
            status, body = call("POST", "/fetch", json.dumps(spec))
            if status is not None:
                check_fetch_result(json.loads(body), path, tally, "fetch-post")
        elif roll < 0.85:
            status, body = call("GET", "/proxy/origin" + path)
            if status is None:
                continue
            fault = path.split("/")[2] if path.startswith("/fault/") else None
            if fault is None:
                ok = status == 200 and body_is_whole(body)
                tally.add("proxy ok" if ok else "proxy wrong body", None if ok else f"proxy {path}: {status} {body[:80]!r}")
            elif fault == "500":
                tally.add("proxy 500 passed on (injected 500)" if status == 500 else "proxy wrong status",
                          None if status == 500 else f"proxy {path}: expected 500, got {status}")
            else:
                try:
                    code = json.loads(body)["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    code = None
                good = code in EXPECTED_CODE[fault]
                tally.add(f"proxy {code} (injected {fault})" if good else "proxy unexpected answer",
                          None if good else f"proxy {path}: {status} {body[:120]!r}")
        elif roll < 0.97:
            paths = [pick_path(rng, distinct) for _ in range(rng.randrange(2, 6))]
            batch = {"mode": "settle", "requests": [{"id": str(i), "url": origin + p, "timeoutMs": REQUEST_TIMEOUT_MS} for i, p in enumerate(paths)]}
            status, body = call("POST", "/batch", json.dumps(batch))
            if status is None:
                continue
            if status != 200:
                tally.add("batch refused", f"batch: {status} {body[:200]!r}")
                continue
            results = {item.get("id"): item for item in json.loads(body).get("responses", [])}
            for i, p in enumerate(paths):
                item = results.get(str(i))
                if item is None:
                    tally.add("batch item missing", f"batch: no result for {p}")
                else:
                    check_fetch_result(item, p, tally, "batch")
        else:
            prefix = origin + "/ok/" + str(rng.randrange(distinct))
            status, body = call("DELETE", "/cache?urlPrefix=" + prefix)
            tally.add("purge ok" if status == 200 else "purge failed", None if status == 200 else f"purge: {status} {body!r}")


def sample(pid, db, port):
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    # Anonymous pages only: the file pages mapped (the executable, its libraries and the
    # database the readers map, MappedReads) are the OS page cache, and grow with the file.
    rss = int(fields["RssAnon"].split()[0]) / 1024
    threads = int(fields["Threads"])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    wal = os.path.getsize(db + "-wal") / 2**20 if os.path.exists(db + "-wal") else 0.0
    # What glibc's heap holds (in use, and free inside its arenas), the memory tier and the
    # request memos, from /metrics: RSS that grows while these stay level is fragmentation, not
    # something kept.
    wanted = ('larder_heap_bytes{state="in_use"}', 'larder_heap_bytes{state="free"}', "larder_memory_tier_bytes",
              "larder_request_memo_bytes")
    scraped = {}
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/metrics")
        for line in connection.getresponse().read().decode().splitlines():
            name, _, value = line.rpartition(" ")
            if name in wanted:
                scraped[name] = float(value) / 2**20
        connection.close()
    except (OSError, http.client.HTTPException, ValueError):
        pass
    return (rss, fds, threads, wal) + tuple(scraped.get(name, float("nan")) for name in wanted)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--clients", type=int, default=32)
    # Ids per path kind; with 5 sizes and 3 ways in (/fetch, POST, /proxy), keys = 15 × this.
    parser.add_argument("--distinct", type=int, default=2000)
    parser.add_argument("--work", required=True)
    # Small request memos (Larder's default is 30 MiB): they fill to their budget within the
    # warm-up, so what comes after shows whether anything else grows.
    parser.add_argument("--memo-mb", type=int, default=4)
    args = parser.parse_args()

    origin = Origin(("127.0.0.1", 0), OriginHandler)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    origin_url = f"http://127.0.0.1:{origin.server_address[1]}"
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    db = os.path.join(args.work, "larder.db")
    log = open(os.path.join(args.work, "larder.log"), "w")
    # A small memory tier (8 MiB) against a working set of ~100 MB: the tier churns all the time.
    larder = subprocess.Popen([args.binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--db", db,
                               "--memory-mb", "8", "--request-memo-mb", str(args.memo_mb),
                               "--upstream", f"origin={origin_url}/"], stdout=log, stderr=log)
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    tally = Tally()
    start = time.time()
    deadline = start + args.minutes * 60
    threads = [threading.Thread(target=client, args=(port, origin_url, deadline, seed, args.distinct, tally), daemon=True)
               for seed in range(args.clients)]
    for thread in threads:
        thread.start()
    samples = []
    print(f"soak: {args.minutes:g} min, {args.clients} clients, {args.distinct} ids, Larder pid {larder.pid} on port {port}, origin {origin_url}")
    print(f"{'t (s)':>6} {'requests':>9} {'anon MiB':>8} {'fds':>5} {'threads':>7} {'WAL MiB':>8} {'heap used':>9} {'heap free':>9} {'tier MiB':>8} {'memos MiB':>9}")
    while time.time() < deadline:
        time.sleep(min(10, max(0, deadline - time.time())))
        if larder.poll() is not None:
            break
        row = sample(larder.pid, db, port)
        samples.append(row)
        done = sum(tally.counts.values())
        print(f"{time.time() - start:6.0f} {done:9d} {row[0]:8.1f} {row[1]:5d} {row[2]:7d} {row[3]:8.1f} {row[4]:9.1f} {row[5]:9.1f} {row[6]:8.1f} {row[7]:9.1f}",
              flush=True)
    for thread in threads:
        thread.join(timeout=60)
    crashed = larder.poll() is not None
    failures = []
    if crashed:
        failures.append(f"Larder exited with {larder.returncode} during the soak")
    else:
        larder.terminate()
        try:
            larder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            larder.kill()
            failures.append("Larder did not stop within 30 s of SIGTERM")
    print("\nanswers:")
    for key in sorted(tally.counts):
        print(f"  {tally.counts[key]:8d}  {key}")
    bad = {k: v for k, v in tally.counts.items()
           if k == "unanswered" or "wrong" in k or "unexpected" in k or "missing" in k or "failed" in k
           or "refused" in k or "as success" in k}
    if bad:
        failures.append(f"bad answers: {bad}")
        for key in sorted(tally.problems):
            for problem in tally.problems[key]:
                print(f"  {key}: {problem}")
    # Growth: after a warm-up (the first third: the memory tier and the request memos fill to
    # their budgets), the last third's peak RSS may not pass the middle third's by more than
    # 10 % + 4 MiB, nor the median heap in use (glibc's figure, steadier than RSS) the middle
    # third's median by more than 5 % + 1 MiB (a leak of 0.5 MiB a minute fails a 10-minute
    # run); fds and threads by 16; the WAL stays bounded.
    if len(samples) >= 6:
        third = len(samples) // 3
        middle, last = samples[third:2 * third], samples[2 * third:]
        peak = lambda rows, i: max(row[i] for row in rows)
        median = lambda rows, i: sorted(row[i] for row in rows)[len(rows) // 2]
        print(f"after warm-up: peak RSS (anonymous) {peak(middle, 0):.1f} -> {peak(last, 0):.1f} MiB, "
              f"median heap in use {median(middle, 4):.1f} -> {median(last, 4):.1f} MiB (middle third -> last third)")
        if peak(last, 0) > peak(middle, 0) * 1.1 + 4:
            failures.append(f"RSS grew after warm-up: {peak(middle, 0):.1f} -> {peak(last, 0):.1f} MiB")
        if median(last, 4) > median(middle, 4) * 1.05 + 1:
            failures.append(f"heap in use grew after warm-up: {median(middle, 4):.1f} -> {median(last, 4):.1f} MiB")
        if peak(last, 1) > peak(middle, 1) + 16:
            failures.append(f"open fds grew after warm-up: {peak(middle, 1)} -> {peak(last, 1)}")
        if peak(last, 2) > peak(middle, 2) + 16:
            failures.append(f"threads grew after warm-up: {peak(middle, 2)} -> {peak(last, 2)}")
        if peak(samples, 3) > 128:
            failures.append(f"WAL reached {peak(samples, 3):.1f} MiB")
    print()
    if failures:
        for failure in failures:
            print("soak: FAILED:", failure)
        print(f"soak: Larder's log: {log.name}")
        sys.exit(1)
    print(f"soak: passed ({sum(tally.counts.values())} answers checked)")


if __name__ == "__main__":
    main()
