#!/usr/bin/env python3
"""Hit ratio under capacity pressure: Larder replayed against libCacheSim's policies.

Run by scripts/bench-hitratio (which installs numpy and libcachesim and builds Larder):

    hitratio.py run --larder .build/release/larder [--quick] [--json-bodies] [options]
    hitratio.py origin PORT        # the loopback origin the replays go through (internal)

For each trace (seeded, so every run replays the same requests) and each capacity (a share of
the trace's distinct bytes), libCacheSim's LRU, SIEVE, S3-FIFO, W-TinyLFU and Belady (its
size-aware BeladySize) process the trace at that byte capacity, and a fresh Larder (release
build, empty temporary database, `--max-bytes` the same capacity, `--memory-mb 0`) is sent the
same requests in the same order, one at a time over one keep-alive connection, through its
proxy-root listener in front of an origin that answers `/o/<id>/<size>` with <size> bytes and
`Cache-Control: max-age=86400`. A request is a hit when Larder's `Cache-Status` says `hit`;
the origin's own request count is checked against the misses.

Traces: Zipf 0.7, 0.9 and 1.1 over the popular objects; Zipf 0.9 with a periodic scan (every
tenth of the trace, 1% of its requests for distinct objects never asked for again); Zipf 0.9
whose popular set moves (every tenth of the trace the rank -> object mapping rotates by a tenth
of the objects: the hot objects go cold and cold ones hot); and Zipf 0.9 for half the requests
with a loop for the other half, cycling in order over a quarter as many objects again (their
own ids and sizes; more than the larger capacities hold, and several times over the trace:
what LRU handles worst). In each, a share of the requests (--ohw) are one-hit wonders (in the
loop trace, of its Zipf half: the loop, like the scan, is laid over the requests).

--json-bodies: the origin answers `/j/<id>/<size>` with a JSON API body of exactly <size>
bytes (records with ids, uuids, names, emails, timestamps, flags, scores, tags and addresses,
deterministic by id), sizes are 1–16 KiB, and Larder is replayed twice at each capacity: with
its defaults (JSON bodies compressed at rest with zstd, counted at their stored size) and with
`--compress-min-bytes 0` (compression off). The policies' figures are for the uncompressed sizes.
"""
import argparse
import asyncio
import collections
import datetime
import email.utils
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

KiB = 1024
MiB = 1024 * 1024

# name -> (zipf skew, what else shapes it: a periodic scan, a moving popular set, a loop). New
# traces go last: a trace's seed is its position here.
TRACES = {
    "zipf0.7": (0.7, None),
    "zipf0.9": (0.9, None),
    "zipf1.1": (1.1, None),
    "zipf0.9+scan": (0.9, "scan"),
    "zipf0.9+moving": (0.9, "moving"),
    "zipf0.9+loop": (0.9, "loop"),
}
POLICIES = [("FIFO", "FIFO"), ("LRU", "LRU"), ("SIEVE", "Sieve"), ("S3-FIFO", "S3FIFO"), ("W-TinyLFU", "WTinyLFU"),
            ("Belady", "BeladySize")]


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# JSON bodies: a page of a users API, deterministic by object id, exactly the size asked for.
# Vocabularies rather than filler, so the body compresses as a real service payload does.

FIRST = ("James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Barbara "
         "Richard Susan Joseph Jessica Thomas Sarah Charles Karen Christopher Lisa Daniel Nancy "
         "Matthew Betty Anthony Margaret Mark Sandra Donald Ashley Steven Kimberly Paul Emily Andrew "
         "Donna Joshua Michelle Kenneth Carol Kevin Amanda Brian Dorothy George Melissa Timothy "
         "Deborah Aiko Mateo Priya Lukas Chloe Omar Ingrid Diego Mei Tariq Sofia Noah Yara").split()
LAST = ("Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez "
        "Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris "
        "Sanchez Clark Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill "
        "Flores Green Adams Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts Tanaka Muller "
        "Kowalski Haddad Okafor Lindqvist Rossi Dubois Novak Fischer Sato Costa Singh").split()
DOMAINS = ("gmail.com outlook.com yahoo.com icloud.com proton.me example.com acme.io "
           "contoso.com fastmail.com hey.com").split()
STREETS = ("Main Oak Pine Maple Cedar Elm Washington Lake Hill Park View Sunset Church Spring "
           "Highland Forest River Meadow Ridge Willow Mill Chestnut Walnut Jackson Franklin").split()
STREET_KINDS = ("Street Avenue Road Boulevard Lane Drive Court Place Way Terrace").split()
CITIES = (("Springfield", "IL"), ("Portland", "OR"), ("Austin", "TX"), ("Denver", "CO"),
          ("Madison", "WI"), ("Raleigh", "NC"), ("Boise", "ID"), ("Tucson", "AZ"), ("Albany", "NY"),
          ("Columbus", "OH"), ("Richmond", "VA"), ("Omaha", "NE"), ("Salem", "MA"), ("Reno", "NV"),
          ("Savannah", "GA"), ("Eugene", "OR"), ("Fresno", "CA"), ("Oakland", "CA"), ("Tampa", "FL"),
          ("Duluth", "MN"), ("Boulder", "CO"), ("Burlington", "VT"), ("Lansing", "MI"), ("Provo", "UT"))
TAGS = ("beta early-adopter enterprise trial churn-risk vip newsletter mobile desktop api-user "
        "admin support partner referral annual monthly edu nonprofit gdpr sso mfa legacy "
        "migrated priority").split()
ROLES = ("owner admin editor viewer billing developer analyst support").split()
PLANS = ("free starter pro business enterprise").split()
LOCALES = ("en-US en-GB de-DE fr-FR es-ES ja-JP pt-BR nl-NL sv-SE it-IT").split()
TIMEZONES = ("America/New_York America/Chicago America/Denver America/Los_Angeles Europe/London "
             "Europe/Berlin Europe/Paris Asia/Tokyo Asia/Kolkata Australia/Sydney").split()
WORDS = ("the of and to in is for on with as account team project update review access "
         "billing report dashboard customer service request support release plan data sync "
         "export import invoice payment schedule meeting feature issue ticket migration "
         "workspace settings profile security notification integration pipeline deploy "
         "quarterly monthly weekly pending active archived approved rejected completed "
         "requested scheduled updated created deleted shared assigned renewed upgraded "
         "please note that this was after before during while because when new old first "
         "last next previous recent primary secondary default custom manual automatic").split()
EPOCH = 1_672_531_200  # 2023-01-01T00:00:00Z


def iso_time(seconds, millis):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + ".%03dZ" % millis


def json_record(rng):
    first, last = rng.choice(FIRST), rng.choice(LAST)
    city, state = rng.choice(CITIES)
    created = EPOCH + rng.randrange(63_072_000)
    handle = f"{first.lower()}.{last.lower()}{rng.randrange(100) if rng.random() < 0.5 else ''}"
    return {
        "id": rng.randrange(1, 10_000_000),
        "uuid": "%08x-%04x-4%03x-%04x-%012x" % (rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
                                               0x8000 | rng.getrandbits(14), rng.getrandbits(48)),
        "name": f"{first} {last}",
        "username": handle,
        "email": f"{handle}@{rng.choice(DOMAINS)}",
        "role": rng.choice(ROLES),
        "plan": rng.choice(PLANS),
        "active": rng.random() < 0.8,
        "emailVerified": rng.random() < 0.7,
        "score": round(rng.uniform(0, 100), 2),
        "loginCount": rng.randrange(2000),
        "tags": rng.sample(TAGS, rng.randrange(4)),
        "address": {
            "street": f"{rng.randrange(1, 9999)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}",
            "city": city, "state": state, "postalCode": "%05d" % rng.randrange(1000, 99999), "country": "US",
            "geo": {"lat": round(rng.uniform(25, 48), 6), "lng": round(rng.uniform(-123, -71), 6)},
        },
        "preferences": {"locale": rng.choice(LOCALES), "timezone": rng.choice(TIMEZONES),
                        "newsletter": rng.random() < 0.4, "theme": rng.choice(("light", "dark", "system"))},
        "createdAt": iso_time(created, rng.randrange(1000)),
        "updatedAt": iso_time(created + rng.randrange(30_000_000), rng.randrange(1000)),
        "lastLoginAt": None if rng.random() < 0.1 else iso_time(created + rng.randrange(40_000_000), rng.randrange(1000)),
    }


JSON_POOL = []


def json_body(obj, size):
    """A users page of exactly `size` bytes (ASCII), the same for the same (obj, size): as many
    records as fit, then a free-text `notice` of words taking up the rest."""
    if not JSON_POOL:
        # Records serialized once (a fixed seed) and drawn by the object's own generator: a body
        # costs a few draws and a join rather than thirty draws a record. Each body is compressed
        # on its own, so records shared between bodies change nothing; within one they differ.
        pool_rng = random.Random(33)
        encode = json.JSONEncoder(separators=(",", ":")).encode
        JSON_POOL.extend(encode(json_record(pool_rng)) for _ in range(8192))
    rng = random.Random(obj)
    request_id = rng.getrandbits(128)

    def envelope(count, notice):
        return ('],"meta":{"object":%d,"page":1,"perPage":%d,"count":%d,"total":%d,"requestId":"%032x"},'
                '"notice":"%s"}' % (obj, count, count, count + obj % 5000, request_id, notice))
    # Room for the records: the size less the envelope at its widest, with an empty notice.
    room = size - len('{"data":[') - len(envelope(999, ""))
    records = []
    used = -1
    for index in rng.sample(range(len(JSON_POOL)), min(len(JSON_POOL), size // 256 + 1)):
        record = JSON_POOL[index]
        if used + 1 + len(record) > room:
            break
        records.append(record)
        used += 1 + len(record)
    head = '{"data":[' + ",".join(records)
    rest = size - len(head) - len(envelope(len(records), ""))
    words = []
    length = -1
    while length < rest:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return (head + envelope(len(records), " ".join(words)[:max(0, rest)])).encode()


# ---------------------------------------------------------------------------------------------
# The origin: asyncio, one process, keep-alive, GET /o/<id>/<size> -> <size> bytes and
# GET /j/<id>/<size> -> a JSON body of <size> bytes, both cacheable for a day. GET /__count
# answers how many object requests it served (not counted itself).

JSON_CACHE_BYTES = 256 * MiB


def serve_origin(port):
    filler = memoryview(b"x" * (64 * KiB + 1))
    state = {"count": 0, "bytes": 0}
    # JSON bodies made once per (id, size) and kept, least recently used out past 256 MiB: every
    # replay of a trace asks for the same ones, and making them anew would slow the misses.
    bodies = collections.OrderedDict()
    kept = {"bytes": 0}

    def json_for(obj, size):
        key = (obj, size)
        body = bodies.get(key)
        if body is not None:
            bodies.move_to_end(key)
            return body
        body = json_body(obj, size)
        bodies[key] = body
        kept["bytes"] += size
        while kept["bytes"] > JSON_CACHE_BYTES:
            kept["bytes"] -= len(bodies.popitem(last=False)[1])
        return body

    date = {"second": 0, "value": b""}

    def http_date():
        now = int(time.time())
        if now != date["second"]:
            date["second"] = now
            date["value"] = email.utils.formatdate(now, usegmt=True).encode()
        return date["value"]

    class Origin(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.buffer = b""

        def data_received(self, data):
            self.buffer += data
            while True:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head, self.buffer = self.buffer[:end], self.buffer[end + 4:]
                target = head.split(b"\r\n", 1)[0].split(b" ")[1]
                if target == b"/__count":
                    body = json.dumps(state).encode()
                    self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                         b"Cache-Control: no-store\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                    continue
                match = re.match(rb"^/([oj])/(\d+)/(\d+)$", target)
                # A JSON body under 256 bytes would not fit its envelope.
                if (not match or int(match.group(3)) > len(filler)
                        or (match.group(1) == b"j" and int(match.group(3)) < 256)):
                    self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                size = int(match.group(3))
                state["count"] += 1
                state["bytes"] += size
                if match.group(1) == b"j":
                    body, kind = json_for(int(match.group(2)), size), b"application/json"
                else:
                    body, kind = filler[:size], b"application/octet-stream"
                self.transport.write(b"HTTP/1.1 200 OK\r\nDate: " + http_date() +
                                     b"\r\nContent-Type: " + kind + b"\r\n"
                                     b"Cache-Control: max-age=86400\r\nContent-Length: %d\r\n\r\n" % size)
                self.transport.write(body)

    async def main():
        server = await asyncio.get_running_loop().create_server(Origin, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# Traces.

def make_trace(name, requests, objects, ohw, seed, max_size=64 * KiB):
    """Returns (ids, sizes) as numpy arrays, one element per request."""
    import numpy as np
    skew, shape = TRACES[name]
    rng = np.random.default_rng([seed, list(TRACES).index(name)])
    ranks = np.arange(1, objects + 1, dtype=np.float64)
    weights = ranks ** -skew
    weights /= weights.sum()
    popular = rng.choice(objects, size=requests, p=weights)  # rank r -> object id r
    # Sizes: log-uniform from 1 KiB to max_size, fixed per object, independent of popularity.
    def log_uniform(count):
        return np.exp(rng.uniform(np.log(1 * KiB), np.log(max_size), count)).astype(np.int64)
    popular_sizes = log_uniform(objects)
    if shape == "moving":
        # The popular set moves: in the k-th tenth of the trace rank r is object (r + k * objects / 10)
        # mod objects, so each tenth the hot objects go cold and the coldest become hot.
        phase = np.arange(requests, dtype=np.int64) * 10 // requests
        popular = (popular + phase * (objects // 10)) % objects
    ids = popular.astype(np.int64)
    sizes = popular_sizes[popular]
    # One-hit wonders: that share of the requests asks for an object never asked for again.
    wonder = rng.random(requests) < ohw
    count = int(wonder.sum())
    ids[wonder] = objects + np.arange(count)
    sizes[wonder] = log_uniform(count)
    next_id = objects + count
    if shape == "scan":
        # A periodic scan: every tenth of the trace, a run of 1% of its requests for distinct
        # objects never asked for again (a crawler, a batch job).
        every, length = max(1, requests // 10), max(1, requests // 100)
        for start in range(every // 2, requests - length, every):
            ids[start:start + length] = next_id + np.arange(length)
            sizes[start:start + length] = log_uniform(length)
            next_id += length
    if shape == "loop":
        # A loop: half the requests, like the scan laid over the rest (so the one-hit wonders are
        # that share of the Zipf half), cycle in order over a quarter as many objects again (their
        # own ids and sizes): more than the larger capacities hold, so LRU evicts each just before
        # it comes round again (a batch job rereading a table).
        members = max(1, objects // 4)
        loop = rng.random(requests) < 0.5
        turn = np.arange(int(loop.sum())) % members
        ids[loop] = next_id + turn
        sizes[loop] = log_uniform(members)[turn]
        next_id += members
    return ids, sizes


def write_oracle_trace(path, ids, sizes):
    """libCacheSim's oracleGeneral binary: <IQIq clock_time, obj_id, obj_size, next_access_vtime."""
    import numpy as np
    n = len(ids)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    next_access = np.full(n, -1, dtype=np.int64)
    same = sorted_ids[1:] == sorted_ids[:-1]
    next_access[order[:-1][same]] = order[1:][same]
    records = np.zeros(n, dtype=np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")]))
    records["t"] = np.arange(n, dtype=np.uint32)
    records["id"] = ids + 1
    records["size"] = sizes
    records["next"] = next_access
    records.tofile(path)


def simulate(path, capacity, objects):
    import libcachesim
    # A hash table sized for the trace (the default, 2^24 buckets, costs seconds a run to clear).
    hashpower = min(26, max(16, (objects - 1).bit_length() + 1))
    results = {}
    for label, cls in POLICIES:
        reader = libcachesim.TraceReader(path, libcachesim.TraceType.ORACLE_GENERAL_TRACE)
        cache = getattr(libcachesim, cls)(capacity, hashpower=hashpower)
        miss, byte_miss = cache.process_trace(reader)
        results[label] = (1 - miss, 1 - byte_miss)
    return results


# ---------------------------------------------------------------------------------------------
# Larder.

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def proc_io(pid):
    fields = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            key, value = line.split(":")
            fields[key] = int(value)
    return fields


def disk_bytes(db):
    total = 0
    for path in (db, db + "-wal", db + "-shm"):
        if os.path.exists(path):
            total += os.path.getsize(path)
    bodies = db + "-bodies"
    for root, _, files in os.walk(bodies):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


class Processes:
    """Every process this helper starts, ended (by its own pid) on the way out."""
    def __init__(self):
        self.running = []

    def start(self, args, **kwargs):
        process = subprocess.Popen(args, **kwargs)
        self.running.append(process)
        return process

    def stop(self, process):
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process in self.running:
            self.running.remove(process)

    def stop_all(self):
        for process in list(self.running):
            self.stop(process)


def wait_until_up(url, process, what):
    for _ in range(300):
        if process.poll() is not None:
            raise SystemExit(f"bench-hitratio: {what} exited ({process.returncode}) before answering")
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"bench-hitratio: {what} did not come up at {url}")


def replay(larder, processes, work, origin_port, ids, sizes, capacity, memory_tier, label, rate,
           kind="o", extra=()):
    """Replays the trace through a fresh Larder (asking for /<kind>/<id>/<size>, with the extra
    arguments); returns its figures."""
    directory = tempfile.mkdtemp(prefix="replay-", dir=work)
    db = os.path.join(directory, "larder.sqlite")
    port, proxy_port = free_port(), free_port()
    args = [larder, "serve", "--host", "127.0.0.1", "--port", str(port), "--db", db, "--no-access-log",
            "--upstream", f"origin=http://127.0.0.1:{origin_port}", "--proxy-root", "origin",
            "--proxy-port", str(proxy_port), "--max-bytes", str(capacity),
            # Every policy beside it admits any object that fits: so does Larder here (its
            # default stores nothing over 5% of --max-bytes).
            "--max-object-bytes", str(capacity), *extra]
    if not memory_tier:
        args += ["--memory-mb", "0"]
    with open(os.path.join(directory, "larder.log"), "wb") as errors:
        server = processes.start(args, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/healthz", server, "larder")
        origin_before = get_json(f"http://127.0.0.1:{origin_port}/__count")["count"]
        io_before = proc_io(server.pid)
        disk_before = disk_bytes(db)
        connection = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=60)
        admin = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def stored_bytes():
            admin.request("GET", "/cache/stats")
            return json.loads(admin.getresponse().read())["stored"]["bytes"]

        hits = hit_bytes = total_bytes = not_stored = 0
        stored_miss_bytes = 0
        peak = 0
        sample_every = max(1000, len(ids) // 50)
        started = time.monotonic()
        id_list, size_list = ids.tolist(), sizes.tolist()
        for i, (obj, size) in enumerate(zip(id_list, size_list)):
            if rate:
                ahead = started + i / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            connection.request("GET", f"/{kind}/{obj}/{size}")
            response = connection.getresponse()
            body = response.read()
            status = response.getheader("Cache-Status", "")
            if response.status != 200 or len(body) != size:
                raise SystemExit(f"bench-hitratio: /{kind}/{obj}/{size} answered {response.status} "
                                 f"with {len(body)} bytes ({status})")
            total_bytes += size
            if "; hit" in status:
                hits += 1
                hit_bytes += size
            elif "; stored" in status:
                stored_miss_bytes += size
            else:
                not_stored += 1
            if i % sample_every == sample_every - 1:
                peak = max(peak, stored_bytes())
        elapsed = time.monotonic() - started
        connection.close()
        # Let the writer commit and evict what is pending: wait until the store stops moving.
        previous = -1
        for _ in range(60):
            time.sleep(0.5)
            now = stored_bytes()
            if now == previous:
                break
            previous = now
        peak = max(peak, now)
        stats = get_json(f"http://127.0.0.1:{port}/cache/stats")
        if os.environ.get("HITRATIO_VERBOSE"):
            log(f"{label}: admission {stats['stored'].get('admission')}")
        shed = metric(port, "larder_store_writes_shed_total")
        io_after = proc_io(server.pid)
        disk_after = disk_bytes(db)
        origin_after = get_json(f"http://127.0.0.1:{origin_port}/__count")["count"]
        admin.close()
    finally:
        processes.stop(server)
    n = len(id_list)
    misses = n - hits
    if origin_after - origin_before != misses:
        log(f"bench-hitratio: {label}: the origin served {origin_after - origin_before} requests "
            f"for {misses} misses")
    written = io_after["write_bytes"] - io_before["write_bytes"]
    source = "proc"
    if written <= 0:
        written, source = max(0, disk_after - disk_before), "files"
    return {
        "hit": hits / n, "byte_hit": hit_bytes / total_bytes, "rate": n / elapsed,
        "end_bytes": stats["stored"]["bytes"], "peak_bytes": peak, "evictions": stats["stored"]["evictions"],
        "entries": stats["stored"]["entries"], "not_stored": not_stored, "shed": int(shed),
        "written_per_request": written / n, "write_source": source,
        "write_amplification": written / stored_miss_bytes if stored_miss_bytes else 0.0,
        "origin_requests": origin_after - origin_before,
        "compressed_stores": stats["sinceStart"].get("compressedStores", 0),
    }


# ---------------------------------------------------------------------------------------------

def percent(value):
    return f"{100 * value:.1f}"


def per_entry(r):
    """Stored bytes (bodies and metadata) an entry at the end of a replay."""
    return r["end_bytes"] / r["entries"] if r["entries"] else 0.0


def git_commit():
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return subprocess.run(["git", "-C", root, "log", "-1", "--format=%h"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def run(options):
    import numpy as np
    processes = Processes()

    def on_signal(number, _frame):
        raise SystemExit(128 + number)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    work = tempfile.mkdtemp(prefix="larder-hitratio-")
    try:
        origin_port = free_port()
        origin = processes.start([sys.executable, os.path.abspath(__file__), "origin", str(origin_port)])
        wait_until_up(f"http://127.0.0.1:{origin_port}/__count", origin, "the origin")
        rows = []
        began = time.monotonic()
        for name in options.traces:
            ids, sizes = make_trace(name, options.requests, options.objects, options.ohw, options.seed,
                                    16 * KiB if options.json_bodies else 64 * KiB)
            path = os.path.join(work, f"{name}.oracleGeneral.bin")
            write_oracle_trace(path, ids, sizes)
            _, first = np.unique(ids, return_index=True)
            distinct = int(sizes[first].sum())
            once = int((np.bincount(np.unique(ids, return_inverse=True)[1]) == 1).sum())
            log(f"== {name}: {len(ids)} requests, {len(first)} distinct objects "
                f"({once} asked for once), {distinct / MiB:.1f} MiB distinct, "
                f"{sizes.sum() / MiB:.1f} MiB requested")
            for pct in options.capacities:
                capacity = int(distinct * pct / 100)
                sims = simulate(path, capacity, len(first))
                row = {"trace": name, "pct": pct, "capacity": capacity, "sims": sims, "larder": None,
                       "larder_mem": None, "larder_plain": None}
                if capacity < MiB:
                    log(f"   {pct}%: {capacity} bytes is under Larder's 1 MiB minimum --max-bytes: not replayed")
                else:
                    label = f"{name} at {pct}%"
                    kind = "j" if options.json_bodies else "o"
                    row["larder"] = replay(options.larder, processes, work, origin_port, ids, sizes,
                                           capacity, False, label, options.rate, kind)
                    if options.json_bodies:
                        # The same again with compression at rest off, at the same --max-bytes.
                        row["larder_plain"] = replay(options.larder, processes, work, origin_port, ids, sizes,
                                                     capacity, False, label + " (no compression)", options.rate,
                                                     kind, ["--compress-min-bytes", "0"])
                    if options.memory_tier:
                        row["larder_mem"] = replay(options.larder, processes, work, origin_port, ids, sizes,
                                                   capacity, True, label + " (memory tier)", options.rate, kind)
                    r = row["larder"]
                    log(f"   {pct}% ({capacity / MiB:.1f} MiB): larder {percent(r['hit'])}% hits "
                        f"({percent(r['byte_hit'])}% bytes) at {r['rate']:.0f} req/s; "
                        + ", ".join(f"{k} {percent(v[0])}%" for k, v in sims.items())
                        + f"; store at the end {r['end_bytes'] / capacity:.2f}x capacity, peak sampled "
                        f"{r['peak_bytes'] / capacity:.2f}x; {r['evictions']} evictions; "
                        f"{r['not_stored']} misses not stored ({r['shed']} shed)")
                    if options.json_bodies:
                        plain = row["larder_plain"]
                        log(f"      no compression: {percent(plain['hit'])}% hits ({percent(plain['byte_hit'])}% bytes) "
                            f"at {plain['rate']:.0f} req/s; bytes an entry {per_entry(r):.0f} compressed, "
                            f"{per_entry(plain):.0f} not; {r['compressed_stores']} stored compressed")
                rows.append(row)
        print_tables(rows, options, time.monotonic() - began)
    finally:
        processes.stop_all()
        subprocess.run(["rm", "-rf", work])


def print_tables(rows, options, elapsed):
    def larder_cell(row, key, which="larder"):
        r = row[which]
        return "–" if r is None else percent(r[key])

    mem, js = options.memory_tier, options.json_bodies
    # The Larder columns: its defaults, then with compression off (JSON mode), then the memory tier.
    larders = [("larder", "Larder (zstd)" if js else "Larder")]
    if js:
        larders.append(("larder_plain", "Larder (no compression)"))
    if mem:
        larders.append(("larder_mem", "Larder (mem 64)"))
    print()
    print(f"Hit ratio under capacity pressure: {options.requests} requests a trace, {options.objects} "
          f"Zipf-popular objects, {int(options.ohw * 100)}% one-hit wonders, sizes "
          f"{'1–16 KiB log-uniform, JSON bodies' if js else '1–64 KiB log-uniform'}, seed {options.seed}"
          f"{f', at most {options.rate:g} req/s' if options.rate else ''}; commit {git_commit()}, {datetime.date.today().isoformat()}, "
          f"{elapsed / 60:.1f} min.")
    print()
    head = ["trace", "capacity"] + [title for _, title in larders] + [p for p, _ in POLICIES]
    # The same table twice: by requests (the simulators' first figure), then by bytes.
    for title, key, column in [("Hit ratio (% of requests):", "hit", 0), ("Byte hit ratio (% of bytes requested):", "byte_hit", 1)]:
        print(title if not js else title[:-1] + "; capacity a share of the distinct uncompressed bytes, "
              "the policies' figures for the uncompressed sizes:")
        print()
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in rows:
            cells = [row["trace"], f"{row['pct']}%"] + [larder_cell(row, key, which) for which, _ in larders]
            cells += [percent(row["sims"][p][column]) for p, _ in POLICIES]
            print("| " + " | ".join(cells) + " |")
        print()
    if js:
        print("Compression at rest (JSON bodies), at the same `--max-bytes`: Larder's hit ratio with its "
              "defaults (zstd) and with `--compress-min-bytes 0`, the difference in points, the stored "
              "bytes an entry at the end of each (`/cache/stats` `stored.bytes` / `stored.entries`, "
              "metadata included) and the bodies stored compressed (`sinceStart.compressedStores`, with "
              "compression on / off); the "
              "policies above count the uncompressed sizes:")
        print()
        print("| trace | capacity | hits zstd | hits off | Δ points | bytes/entry zstd | bytes/entry off "
              "| zstd / off | entries zstd | entries off | stored compressed on / off |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for row in rows:
            r, plain = row["larder"], row["larder_plain"]
            if r is None or plain is None:
                continue
            ratio = per_entry(r) / per_entry(plain) if per_entry(plain) else 0.0
            print(f"| {row['trace']} | {row['pct']}% | {percent(r['hit'])} | {percent(plain['hit'])} "
                  f"| {100 * (r['hit'] - plain['hit']):+.1f} | {per_entry(r):.0f} | {per_entry(plain):.0f} "
                  f"| {ratio:.2f} | {r['entries']} | {plain['entries']} | {r['compressed_stores']} / "
                  f"{plain['compressed_stores']} |")
        print()
    print("Larder's store (`--memory-mb 0`): bytes at the end and the highest sampled during the replay "
          "(`/cache/stats`, every 2% of the trace), as a multiple of `--max-bytes`; database bytes "
          "written per request (`write_bytes` of /proc/PID/io: the database, its WAL and the body "
          "files) and over the bytes of the misses it stored; replay rate (one connection):")
    print()
    stores = [(which, title) for which, title in larders if which != "larder_mem"]
    print("| trace | capacity |" + (" replay |" if js else "")
          + " MiB | end / cap | peak / cap | evictions | KiB written / req | written / stored | req/s |")
    print("|---|---|" + ("---|" if js else "") + "---|---|---|---|---|---|---|")
    sources = set()
    for row in rows:
        for which, title in stores:
            r = row[which]
            if r is None:
                continue
            sources.add(r["write_source"])
            print(f"| {row['trace']} | {row['pct']}% |" + (f" {title} |" if js else "")
                  + f" {row['capacity'] / MiB:.1f} | {r['end_bytes'] / row['capacity']:.2f} "
                  f"| {r['peak_bytes'] / row['capacity']:.2f} | {r['evictions']} | {r['written_per_request'] / KiB:.1f} "
                  f"| {r['write_amplification']:.2f} | {r['rate']:.0f} |")
    if "files" in sources:
        print()
        print("(write_bytes read 0 on this file system for some rows: those give the growth of the "
              "database, WAL and body files instead)")
    replays = [row[which] for row in rows for which, _ in stores if row[which]]
    not_stored = sum(r["not_stored"] for r in replays)
    shed = sum(r["shed"] for r in replays)
    print()
    print(f"Misses Larder answered without storing: {not_stored} ({shed} shed because the writer was behind).")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "origin":
        serve_origin(int(sys.argv[2]))
        return
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="scripts/bench-hitratio", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("--larder", required=True, help="the larder binary (release)")
    p.add_argument("--quick", action="store_true", help="a smaller run (about 3–5 minutes)")
    p.add_argument("--requests", type=int, default=env("HITRATIO_REQUESTS"), help="requests per trace")
    p.add_argument("--objects", type=int, default=env("HITRATIO_OBJECTS"), help="Zipf-popular objects per trace")
    p.add_argument("--capacities", default=env("HITRATIO_CAPACITIES"),
                   help="capacities in %% of the trace's distinct bytes, comma-separated (default 1,5,10,20)")
    p.add_argument("--traces", default=env("HITRATIO_TRACES"),
                   help="comma-separated, of " + ", ".join(TRACES) + " (default all)")
    p.add_argument("--ohw", type=float, default=float(env("HITRATIO_OHW", "0.25")),
                   help="share of requests for one-hit wonders (default 0.25)")
    p.add_argument("--seed", type=int, default=int(env("HITRATIO_SEED", "33")))
    p.add_argument("--rate", type=float, default=float(env("HITRATIO_RATE", "0")),
                   help="send at most this many requests a second (default 0: as fast as answered)")
    p.add_argument("--memory-tier", action="store_true", default=env("HITRATIO_MEMORY_TIER") == "1",
                   help="also replay with the default memory tier (--memory-mb 64)")
    p.add_argument("--json-bodies", action="store_true", default=env("HITRATIO_JSON") == "1",
                   help="JSON bodies of 1-16 KiB, Larder replayed with compression at rest on and off")
    options = parser.parse_args()
    if options.quick:
        options.requests = options.requests or 12_000
        options.objects = options.objects or 6_000
        options.capacities = options.capacities or "5,20"
    options.requests = int(options.requests or 60_000)
    options.objects = int(options.objects or 20_000)
    options.capacities = [float(c) if "." in c else int(c)
                          for c in (options.capacities or "1,5,10,20").split(",")]
    options.traces = (options.traces or ",".join(TRACES)).split(",")
    for name in options.traces:
        if name not in TRACES:
            parser.error(f"unknown trace {name!r}: choose from {', '.join(TRACES)}")
    run(options)


if __name__ == "__main__":
    main()
