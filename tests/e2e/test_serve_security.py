"""mlprof serve against hostile clients: Host names a rebinding attack would
send, duplicate Host headers, the token of a non-loopback listener, garbage
and slow connections, and a large run being read while others are asked
for. Connects to 127.0.0.1 only."""
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import MLPROF, lib, program  # noqa: F401
from test_html import Server, record


def status(out):
    return int(out.split(b" ", 2)[1]) if out else None


def ask(srv, host_lines, path="/api/runs"):
    req = f"GET {path} HTTP/1.1\r\n{host_lines}Connection: close\r\n\r\n"
    return status(srv.raw(req.encode()))


@pytest.fixture
def small(lib, tmp_path):
    root = tmp_path / "runs"
    (root / "small").mkdir(parents=True)
    record(lib, root / "small" / "p.mlprof", [b"load"])
    return root


EVIL = ["127.attacker.example", "127.0.0.1.evil.com", "127.0.0.1.nip.io",
        "127.0.0.1@evil.com", "evil.com", "localhost.evil.com", "127.0.0.1:80@evil.com",
        "127.0.0.1:8050.evil.com", "[::1].evil.com", "[::1", "::1", "10.0.0.1",
        "[fe80::1]", "127.1", "0x7f.0.0.1", "", "127.0.0.1:123456", "127.0.0.1:x"]
GOOD = ["127.0.0.1", "127.0.0.1:8050", "127.3.4.5", "127.3.4.5:1", "localhost",
        "LocalHost:8050", "[::1]", "[::1]:8050"]


def test_host_names(small):
    srv = Server(small)
    try:
        for h in EVIL:
            assert ask(srv, f"Host: {h}\r\n") == 403, h
        for h in GOOD:
            assert ask(srv, f"Host: {h}\r\n") == 200, h
        # The answer names the option that would accept the name.
        st, _, body = srv.get("/", headers={"Host": "evil.com"})
        assert st == 403 and b"--allow-host" in body
    finally:
        assert srv.stop() == 0


def test_two_host_headers(small):
    srv = Server(small)
    try:
        for pair in [("127.0.0.1", "evil.com"), ("evil.com", "127.0.0.1"),
                     ("127.0.0.1", "127.0.0.1")]:
            assert ask(srv, "".join(f"Host: {h}\r\n" for h in pair)) == 400, pair
        assert ask(srv, "Host: 127.0.0.1\r\nhost: evil.com\r\n") == 400
    finally:
        assert srv.stop() == 0


def test_allow_host(small):
    assert subprocess.run([MLPROF, "serve", small, "--allow-host", "a/b"],
                          capture_output=True, timeout=30).returncode == 2
    srv = Server(small, "--allow-host", "profiles.internal", "--allow-host", "Box")
    try:
        assert ask(srv, "Host: profiles.internal:8050\r\n") == 200
        assert ask(srv, "Host: box\r\n") == 200
        assert ask(srv, "Host: profiles.internal.evil.com\r\n") == 403
        assert ask(srv, "Host: evil.com\r\n") == 403
    finally:
        assert srv.stop() == 0


def test_token_on_a_non_loopback_address(small):
    # Listens on every address; the test only ever connects to 127.0.0.1.
    srv = Server(small, "--bind", "0.0.0.0")
    try:
        m = re.search(r"\?token=([0-9a-f]{32}) ", srv.line)
        assert m, srv.line
        token = m.group(1)
        for path in ["/", "/api/runs", "/data/small", "/metrics", "/run/small/"]:
            assert srv.get(path)[0] == 403, path
            assert srv.get(path + "?token=" + "0" * 32)[0] == 403, path
            assert srv.get(path + "?token=" + token[:-1])[0] == 403, path
        # The URL's token is answered with a cookie; the page's own requests
        # (no token in their URLs) then carry it.
        st, hd, _ = srv.get("/?token=" + token)
        assert st == 200
        cookie = hd["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        pair = cookie.split(";")[0]
        assert pair.split("=")[1] == token
        assert srv.get("/data/small", headers={"Cookie": pair})[0] == 200
        assert srv.get("/data/small", headers={"Cookie": pair[:-1] + "x"})[0] == 403
        # Another IP literal names this server; a DNS name is still refused.
        assert ask(srv, "Host: 192.0.2.7:8050\r\n", "/api/runs?token=" + token) == 200
        assert ask(srv, "Host: evil.com\r\n", "/api/runs?token=" + token) == 403
    finally:
        assert srv.stop() == 0


def test_no_token_is_explicit(small):
    srv = Server(small, "--bind", "0.0.0.0", "--no-token")
    try:
        assert "?token=" not in srv.line and "--no-token" in srv.line
        assert srv.get("/api/runs")[0] == 200
    finally:
        assert srv.stop() == 0
    # On loopback no token is asked for.
    srv = Server(small)
    try:
        assert "?token=" not in srv.line and srv.get("/api/runs")[0] == 200
    finally:
        assert srv.stop() == 0


def answered(sock):
    """Whether an answer has started to arrive on sock (without waiting)."""
    sock.setblocking(False)
    try:
        return len(sock.recv(1, socket.MSG_PEEK)) > 0
    except BlockingIOError:
        return False
    finally:
        sock.setblocking(True)


def read_status(sock):
    out = b""
    while b"\r\n" not in out:
        chunk = sock.recv(4096)
        if not chunk:
            break
        out += chunk
    return status(out)


def send_get(path, source="127.0.0.1"):
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(120)
    s.connect(("127.0.0.1", SERVER_PORT[0]))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    return s


SERVER_PORT = [0]


@pytest.fixture
def big_and_small(small):
    # 20 million spans: reading them takes seconds (4 s here, idle), a small
    # run milliseconds. With 8 million a fast idle machine read the big run
    # before the three small requests were through.
    subprocess.run([MLPROF, "run", "-q", "-o", small / "big", "--",
                    program("workload"), "5000000"], check=True, timeout=300,
                   env={**os.environ, "MLPROF_WORK": "0"},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    srv = Server(small)
    SERVER_PORT[0] = srv.port
    yield srv, small
    assert srv.stop() == 0


def test_a_large_run_being_read_does_not_stall_others(big_and_small):
    srv, root = big_and_small
    big = send_get("/data/big")
    time.sleep(0.5)  # not a budget: lets the server start reading big first
    # The small run is answered, again and again, while the big one is still
    # being read (with one lock for all, the first waited for the big run, and
    # the big run's answer went out before the second was asked for).
    for _ in range(3):
        with send_get("/data/small") as s:
            assert read_status(s) == 200
    assert not answered(big)
    assert read_status(big) == 200
    big.close()
    # Changed, the big run is read again; meanwhile its previous reading is
    # what others get.
    for f in (root / "big").iterdir():
        os.utime(f, (time.time() + 5, time.time() + 5))
    big = send_get("/data/big")
    time.sleep(0.5)
    for path in ["/data/big", "/data/small", "/data/big"]:
        with send_get(path) as s:
            assert read_status(s) == 200
    assert not answered(big)
    assert read_status(big) == 200
    big.close()


def test_a_run_being_read_holds_no_server_thread(big_and_small):
    srv, root = big_and_small
    big = send_get("/data/big")
    time.sleep(0.5)  # not a budget: lets the server start reading big first
    # Many requests at once land on every one of the server's threads; with
    # the big run read inside one of them, the requests given to that thread
    # waited for the whole reading.
    smalls = [send_get("/data/small") for _ in range(16)]
    for s in smalls:
        assert read_status(s) == 200
        s.close()
    assert not answered(big)
    assert read_status(big) == 200
    big.close()


def test_stopping_while_a_run_is_read(big_and_small):
    srv, root = big_and_small
    # Requests suspended until the big run is read: libmicrohttpd aborts
    # when stopped with one still suspended.
    waiting = [send_get("/data/big") for _ in range(3)]
    time.sleep(0.5)  # not a budget: lets the server start reading big first
    assert not any(answered(s) for s in waiting)
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=120) == 0
    err = srv.proc.stderr.read()
    assert "stopping (SIGTERM)" in err and "Fatal" not in err, err
    for s in waiting:
        assert read_status(s) in (503, None)  # told, or closed
        s.close()


def test_slow_connections_do_not_stop_others(small):
    srv = Server(small)
    SERVER_PORT[0] = srv.port
    slow, stop = [], threading.Event()

    def trickle():
        while not stop.wait(2):
            for s in slow:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass

    t = threading.Thread(target=trickle)
    try:
        # 600 connections from one address that send a header line every 2 s
        # and never end their requests.
        for i in range(600):
            s = socket.socket()
            try:
                s.connect(("127.0.0.1", srv.port))
                s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            except OSError:
                pass
            slow.append(s)
        t.start()
        # Another address is answered (before the test's timeout).
        with send_get("/api/runs", source="127.0.0.2") as s:
            s.settimeout(60)
            assert read_status(s) == 200
    finally:
        stop.set()
        if t.is_alive():
            t.join()
        for s in slow:
            s.close()
        assert srv.stop() == 0


def test_garbage_gets_400_at_once(small):
    srv = Server(small)
    try:
        for req in [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GARBAGE\r\n\r\n",
                    b"hello\n", b"\x00\x00\x00\x00"]:
            # The server answers and closes without waiting for more.
            with socket.create_connection(("127.0.0.1", srv.port), timeout=120) as s:
                s.sendall(req)
                out = b""
                while chunk := s.recv(4096):
                    out += chunk
            assert status(out) == 400, (req, out[:60])
        assert srv.get("/api/runs")[0] == 200
    finally:
        assert srv.stop() == 0


def try_status(sock):
    """The status of the answer on sock, or 'reset' when the server reset
    the connection, or None when it closed it without a word."""
    try:
        return read_status(sock)
    except ConnectionResetError:
        return "reset"


def get_status(port, path, headers=""):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        try:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}"
                      "Connection: close\r\n\r\n".encode())
        except ConnectionResetError:
            return "reset"
        return try_status(s)


def test_slow_clients_are_dropped_in_time_and_others_answered(small):
    # Every local client is 127.0.0.1: a limit per address alone let 64 slow
    # clients (a header line a second, never ending their requests) hold the
    # server, and the others' requests were reset. A request's head must come
    # whole within 5 s: the slow ones get 408, the others their answers.
    srv = Server(small)
    slow, answers = [], []
    try:
        for _ in range(64):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            s.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            slow.append(s)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 9:  # past the 5 s the slow ones have
            for s in slow:
                if answered(s):
                    continue  # its answer is read below
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass
            for _ in range(5):
                answers.append(get_status(srv.port, "/data/small"))
            time.sleep(0.5)
        assert len(answers) >= 40 and set(answers) == {200}, answers
        assert [try_status(s) for s in slow] == [408] * 64
        # Waiting for the rest of a head costs the server nothing meanwhile
        # (a head peeked at and left unread must not wake it again and again).
        with open(f"/proc/{srv.proc.pid}/stat") as f:
            ticks = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
        assert ticks / os.sysconf("SC_CLK_TCK") < 2.0, ticks
    finally:
        for s in slow:
            s.close()
        assert srv.stop() == 0


def test_many_requests_at_once_are_all_answered(small):
    # 200 connections open at once, then their requests: each is answered
    # (those past what the server holds wait their turn), none is reset.
    srv = Server(small)
    socks = []
    try:
        for _ in range(200):
            socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=60))
        for i, s in enumerate(socks):
            path = "/data/small" if i % 2 else "/api/runs"
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        assert [try_status(s) for s in socks] == [200] * 200
    finally:
        for s in socks:
            s.close()
        assert srv.stop() == 0


def test_requests_from_other_sites_are_refused(small):
    # A page of another site could make the server read runs (blindly: it
    # cannot read the answers); browsers name such a page's origin (Origin)
    # and the kind of site (Sec-Fetch-Site). The runs list reads no run, so
    # a link from elsewhere may land there.
    srv = Server(small)
    own = f"http://127.0.0.1:{srv.port}"
    try:
        foreign = [f"Origin: http://evil.example\r\n", "Origin: null\r\n",
                   f"Origin: {own}.evil.example\r\n", "Origin: http://127.0.0.1:1\r\n",
                   f"Origin: file://\r\n", "Sec-Fetch-Site: cross-site\r\n",
                   "Sec-Fetch-Site: same-site\r\n",
                   f"Origin: {own}\r\nSec-Fetch-Site: cross-site\r\n"]
        paths = ["/data/small", "/run/small/", "/metrics", "/api/runs",
                 "/timeline/small?t0=0&t1=1000000&res=1000", "/span/small?track=0&t0=0&t1=1"]
        for path in paths:
            for h in foreign:
                assert get_status(srv.port, path, h) == 403, (path, h)
        st, _, body = srv.get("/data/small", headers={"Origin": "http://evil.example"})
        assert st == 403 and b"another site" in body and b"evil.example" in body, body
        # The page's own requests, typed URLs and curl-like clients are served.
        own_ok = ["", f"Origin: {own}\r\n", f"Origin: {own.upper()}\r\n",
                  "Sec-Fetch-Site: same-origin\r\n", "Sec-Fetch-Site: none\r\n",
                  f"Origin: {own}\r\nSec-Fetch-Site: same-origin\r\n"]
        for path in ["/data/small", "/run/small/", "/metrics", "/api/runs"]:
            for h in own_ok:
                assert get_status(srv.port, path, h) == 200, (path, h)
        for h in foreign:
            assert get_status(srv.port, "/", h) == 200, h
    finally:
        assert srv.stop() == 0
