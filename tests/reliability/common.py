"""Shared plumbing of the reliability suite (Python 3 stdlib only).

- Broker: starts/stops/kills the real `queen-broker` binary on a loopback port.
- Client: a tiny keep-alive HTTP/1.1 JSON client (one per thread) that records every
  status and every dropped connection.
- psql(): one-shot SQL through the `psql` CLI; Psql: a persistent psql co-process for
  fast repeated snapshots.
- Cluster: restart/immediate-stop of the test cluster laid out by tests/cluster.sh
  (data dir /tmp/qa-test-cluster-$PORT, socket /tmp/qa-test-sock-$PORT).

Configuration comes from the environment (tests/reliability.sh sets it):
  QUEEN_DATABASE_URL     postgres URL of the cluster (required)
  QUEEN_BROKER_BIN       path to target/debug/queen-broker
  RELIABILITY_PG_DATA    data dir of that cluster (default /tmp/qa-test-cluster-$PORT)
  RELIABILITY_PG_SOCK    socket dir (default /tmp/qa-test-sock-$PORT)
  RELIABILITY_PG_EXTRA_DATA  more data dirs whose server.log is scanned (a Citus cluster's workers)
  RELIABILITY_LONG=1     long forms
  RELIABILITY_SEED       seed of every randomized choice (default 6)
  RELIABILITY_WORKDIR    where broker logs go (default a fresh temp dir)
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PG_CONFIG = os.environ.get("PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config")
PGBIN = subprocess.run([PG_CONFIG, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()

DB_URL = os.environ.get("QUEEN_DATABASE_URL", "")
if not DB_URL.startswith("postgres"):
    # Never fall back to the broker's default URL: that is somebody else's cluster.
    sys.exit("QUEEN_DATABASE_URL must name the test cluster (postgres://...); refusing to run")
LONG = os.environ.get("RELIABILITY_LONG", "0") == "1"
SEED = int(os.environ.get("RELIABILITY_SEED", "6"))
BROKER_BIN = os.environ.get("QUEEN_BROKER_BIN", os.path.join(ROOT, "target", "debug", "queen-broker"))


def _pg_port():
    # A multi-host URL (the failover drill's) names no one port: the first host's.
    try:
        return urllib.parse.urlparse(DB_URL.split(",")[0]).port or 5432
    except ValueError:
        return 5432


PG_PORT = _pg_port() if DB_URL else 5432
PG_DATA = os.environ.get("RELIABILITY_PG_DATA") or f"/tmp/qa-test-cluster-{PG_PORT}"
PG_SOCK = os.environ.get("RELIABILITY_PG_SOCK") or f"/tmp/qa-test-sock-{PG_PORT}"
WORKDIR = os.environ.get("RELIABILITY_WORKDIR") or tempfile.mkdtemp(prefix="queen-reliability-")
os.makedirs(WORKDIR, exist_ok=True)


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


class Failures:
    """Collects assertion failures; a test fails iff this is non-empty at the end."""

    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def add(self, msg):
        with self.lock:
            if len(self.items) < 1000:
                self.items.append(msg)

    def check(self, cond, msg):
        if not cond:
            self.add(msg)
        return cond

    def report(self, name):
        if self.items:
            log(f"{name}: {len(self.items)} failure(s):")
            for m in self.items[:40]:
                print("   FAIL:", m, flush=True)
            if len(self.items) > 40:
                print(f"   ... and {len(self.items) - 40} more", flush=True)
            return 1
        log(f"{name}: all assertions held")
        return 0


# --------------------------------------------------------------------------- SQL


def psql(sql, timeout=30, check=True):
    """Runs SQL through the psql CLI; returns rows as lists of strings (unaligned, '|')."""
    p = subprocess.run(
        ["psql", DB_URL, "-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-F", "\t", "-c", sql],
        capture_output=True, text=True, timeout=timeout,
    )
    if check and p.returncode != 0:
        raise RuntimeError(f"psql failed ({p.returncode}): {p.stderr.strip()} -- {sql[:200]}")
    return [line.split("\t") for line in p.stdout.splitlines() if line != ""]


class Psql:
    """A persistent psql co-process: one query per call, output until a marker line."""

    MARK = "__RELIABILITY_END__"

    def __init__(self):
        self.p = subprocess.Popen(
            ["psql", DB_URL, "-X", "-qAt", "-F", "\t"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1,
        )

    def query(self, sql):
        self.p.stdin.write(sql.rstrip().rstrip(";") + ";\n\\echo " + self.MARK + "\n")
        self.p.stdin.flush()
        out = []
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.p.stdout.readline()
            if line == "":
                raise RuntimeError("psql co-process died: " + "".join(out))
            line = line.rstrip("\n")
            if line == self.MARK:
                return out
            out.append(line)
        raise RuntimeError("psql co-process timed out")

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=5)
        except Exception:
            self.p.kill()


# --------------------------------------------------------------------------- cluster


def as_pg(*args, timeout=60):
    return subprocess.run(["sudo", "-u", "postgres", *args], capture_output=True, text=True, timeout=timeout)


def pg_stop_immediate():
    return as_pg(f"{PGBIN}/pg_ctl", "-D", PG_DATA, "stop", "-m", "immediate")


def pg_start():
    return as_pg(
        f"{PGBIN}/pg_ctl", "-D", PG_DATA, "-l", f"{PG_DATA}/server.log", "-w",
        "-o", f"-p {PG_PORT} -k {PG_SOCK} -c listen_addresses=127.0.0.1", "start",
        timeout=120,
    )


# Server logs scanned for deadlocks and crashes: the cluster's own and, on a Citus
# cluster, every worker's (RELIABILITY_PG_EXTRA_DATA: their data dirs, colon-separated).
PG_LOG_DIRS = [PG_DATA] + [d for d in os.environ.get("RELIABILITY_PG_EXTRA_DATA", "").split(":") if d]


def pg_log_paths():
    return [os.path.join(d, "server.log") for d in PG_LOG_DIRS]


def pg_log_size():
    """Where each server log ends now: the mark to give pg_log_since."""
    sizes = {}
    for path in pg_log_paths():
        try:
            sizes[path] = os.path.getsize(path)
        except OSError:
            sizes[path] = 0
    return sizes


def pg_log_since(mark):
    """What every server log gained since pg_log_size() returned `mark`."""
    text = []
    for path in pg_log_paths():
        try:
            with open(path, "rb") as f:
                f.seek(mark.get(path, 0))
                text.append(f.read().decode("utf-8", "replace"))
        except OSError:
            pass
    return "".join(text)


def deadlocks_in(text):
    return [l for l in text.splitlines() if "40P01" in l or "deadlock detected" in l]


def backend_crashes_in(text):
    """Server processes that died of a signal (a crash in the extension shows up here)."""
    return [l for l in text.splitlines() if "terminated by signal" in l]


# --------------------------------------------------------------------------- broker


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Broker:
    def __init__(self, name, port=None, env=None):
        self.name = name
        self.port = port or free_port()
        self.env = dict(os.environ)
        self.env.update({
            "QUEEN_DATABASE_URL": DB_URL,
            "QUEEN_LISTEN": f"127.0.0.1:{self.port}",
            "RUST_LOG": os.environ.get("RUST_LOG", "warn"),
        })
        self.env.update(env or {})
        self.proc = None
        self.logs = []
        self.starts = 0

    def start(self, wait=30):
        self.starts += 1
        path = os.path.join(WORKDIR, f"broker-{self.name}-{self.starts}.log")
        self.logs.append(path)
        self.logf = open(path, "wb")
        self.proc = subprocess.Popen([BROKER_BIN], env=self.env, stdout=self.logf, stderr=subprocess.STDOUT)
        deadline = time.time() + wait
        c = Client(self.port, record=False)
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}; log {path}")
            try:
                st, _ = c.request("GET", "/health", timeout=2)
                if st == 200:
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"broker not healthy after {wait}s; log {path}")

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.proc = None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        out = []
        for p in self.logs:
            try:
                with open(p, "rb") as f:
                    out.append(f.read().decode("utf-8", "replace"))
            except OSError:
                pass
        return "\n".join(out)

    def panics(self):
        return [l for l in self.log_text().splitlines() if "panicked" in l]


class Stats:
    """Thread-safe counters of every HTTP answer."""

    def __init__(self):
        self.lock = threading.Lock()
        self.status = {}
        self.fivexx = []
        self.dropped = []

    def record(self, method, path, status, body):
        with self.lock:
            self.status[status] = self.status.get(status, 0) + 1
            if status >= 500 and len(self.fivexx) < 200:
                self.fivexx.append((method, path[:120], status, body[:300]))

    def drop(self, method, path, err):
        with self.lock:
            if len(self.dropped) < 200:
                self.dropped.append((method, path[:120], repr(err)[:200]))


class Client:
    """Keep-alive HTTP/1.1 client. request() returns (status, raw body bytes).

    Like any keep-alive client (urllib3, httpx, reqwest), it checks an idle connection
    before reusing it: the broker closes connections that stay idle longer than
    QUEEN_HEADER_READ_TIMEOUT_MS, and a request written into such a socket would fail."""

    def __init__(self, port, stats=None, record=True):
        self.port = port
        self.stats = stats
        self.record = record
        self.conn = None

    def _conn(self, timeout):
        if self.conn is not None and self.conn.sock is not None and _dropped(self.conn.sock):
            self.close()
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        self.conn.timeout = timeout
        if self.conn.sock is not None:
            self.conn.sock.settimeout(timeout)
        return self.conn

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, timeout=30, headers=None):
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
        try:
            c = self._conn(timeout)
            try:
                c.request(method, path, body=body, headers=h)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer (e.g. 413) and close before reading a large body:
                # the answer is still in our receive buffer.
                if c.sock is None:
                    raise
            r = c.getresponse()
            data = r.read()
            if r.getheader("connection", "").lower() == "close":
                self.close()
        except Exception as e:
            self.close()
            if self.stats is not None and self.record:
                self.stats.drop(method, path, e)
            raise
        if self.stats is not None and self.record:
            self.stats.record(method, path, r.status, data.decode("utf-8", "replace"))
        return r.status, data

    def json(self, method, path, body=None, timeout=30):
        st, data = self.request(method, path, body, timeout=timeout)
        try:
            return st, (json.loads(data) if data else None)
        except ValueError:
            return st, data


def _dropped(sock):
    """True when an idle keep-alive socket was closed by the peer (readable with no
    answer pending means EOF or a reset)."""
    import select
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def q(s):
    return urllib.parse.quote(s, safe="")


def maintenance_metrics(client):
    """The broker's queen_maintenance_* samples from /metrics, by series."""
    st, data = client.request("GET", "/metrics/prometheus")
    out = {}
    for line in data.decode().splitlines() if st == 200 else []:
        if line.startswith("queen_maintenance_"):
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out


def configure(client, queue, **options):
    st, body = client.json("POST", "/api/v1/configure", {"queue": queue, "options": options})
    if st != 200:
        raise RuntimeError(f"configure {queue}: {st} {body}")
    return body


def exit_with(failures, name):
    sys.exit(failures.report(name))


def wait_extension(seconds=180):
    """Waits until the extension's library loads in a fresh backend. Other sessions on this
    machine run `cargo pgrx install/test`, which replace the shared library under a running
    cluster; a test started in that window fails with 58P01 for reasons not its own."""
    deadline = time.time() + seconds
    last = ""
    while time.time() < deadline:
        try:
            rows = psql("SELECT encode(queen.xxh3_128(''), 'hex')", timeout=20)
            if rows and rows[0][0] == "99aa06d3014798d86001c324468d497f":
                return True
            last = f"unexpected answer {rows}"
        except Exception as e:
            last = str(e)
        time.sleep(2)
    log(f"extension library not loadable after {seconds}s: {last}")
    return False


def _building_version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        return re.search(r'^version = "(.*)"', f.read(), re.M).group(1)


# The library of the version being built (a library per version).
LIB_PATH = (subprocess.run([PG_CONFIG, "--pkglibdir"], capture_output=True, text=True, check=True).stdout.strip()
            + f"/queen_ack-{_building_version()}.so")


def lib_stat():
    try:
        st = os.stat(LIB_PATH)
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return None


LIB_STAT_AT_START = lib_stat()


def environment_note(stats):
    """Names the 58P01 case (library replaced mid-run) so a failure is read correctly."""
    hits = [x for x in stats.fivexx if "58P01" in x[3] or "could not access file" in x[3]]
    if LIB_STAT_AT_START != lib_stat():
        log("ENVIRONMENT: the extension library file was replaced during this test (another session ran "
            "cargo pgrx install/test; rewriting a mapped .so in place kills backends with SIGBUS)")
    if hits:
        log(f"ENVIRONMENT: {len(hits)}+ answers failed with 58P01 (extension library missing: another "
            "session ran cargo pgrx install/test mid-run); rerun before reading this as a broker bug")


if __name__ == "__main__":
    if sys.argv[1:] == ["wait-extension"]:
        sys.exit(0 if wait_extension() else 1)
