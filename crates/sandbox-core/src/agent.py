# The main process of a python-sandbox session container: an idle watchdog that also serves
# execs over a unix socket in the container's own /tmp, so a warm `session run` costs a fork
# instead of a round trip through the Docker API (see agent.rs for the client and the wire
# format). It runs as the sandbox user with the container's environment, exactly like an exec:
# it grants nothing the sandboxed code does not already have.
#
# Idle TTL: requests served here and execs registered under /tmp/.active (the exec fallback
# path) count as activity; once nothing ran for the TTL the process exits and the auto-removed
# container disappears, even if no CLI ever runs again.
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

TTL = max(1, int(sys.argv[1]))
SOCK = "/tmp/.python-sandbox-agent.sock"
ACTIVE = "/tmp/.active"
LAST = "/tmp/.last-activity"
HEADER_LIMIT = 16 << 20

lock = threading.Lock()
running = 0


def touch():
    try:
        with open(LAST, "a"):
            pass
        os.utime(LAST)
    except OSError:
        pass


def read_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def send(conn, kind, data):
    conn.sendall(kind + struct.pack(">I", len(data)) + data)


def kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def feed(proc, data):
    try:
        proc.stdin.write(data)
    except OSError:
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def relay(conn, req, stdin):
    env = dict(os.environ)
    env.update({k: v for k, v in req.get("env", [])})
    try:
        proc = subprocess.Popen(
            req["argv"],
            cwd=req.get("cwd") or "/",
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except (OSError, ValueError, TypeError, KeyError) as e:
        send(conn, b"f", str(e).encode())
        return
    if stdin:
        threading.Thread(target=feed, args=(proc, stdin), daemon=True).start()
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, b"o")
    sel.register(proc.stderr, selectors.EVENT_READ, b"e")
    sel.register(conn, selectors.EVENT_READ, None)
    timeout = req.get("timeout")
    deadline = time.monotonic() + timeout if timeout else None
    pipes, timed_out, exited_at = 2, False, None
    try:
        while pipes:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                timed_out = True
                kill(proc)
                deadline = None
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            # Like a shell: once the command exited, background children that keep its
            # output open get a moment, not forever.
            if exited_at is not None and now - exited_at > 0.2:
                break
            wait = 0.1
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - now))
            for key, _ in sel.select(wait):
                if key.data is None:
                    if not conn.recv(4096):
                        # The client went away (Ctrl-C, killed): so does the command.
                        kill(proc)
                        return
                    continue
                chunk = os.read(key.fd, 65536)
                if chunk:
                    send(conn, key.data, chunk)
                else:
                    sel.unregister(key.fileobj)
                    pipes -= 1
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    code = proc.wait()
    if code < 0:
        code = 128 - code
    send(conn, b"x", json.dumps({"code": code, "timed_out": timed_out}).encode())


def serve(conn):
    global running
    with lock:
        running += 1
    touch()
    try:
        (n,) = struct.unpack(">I", read_exact(conn, 4))
        if n > HEADER_LIMIT:
            return
        req = json.loads(read_exact(conn, n))
        stdin = read_exact(conn, int(req.get("stdin", 0)))
        relay(conn, req, stdin)
    except (OSError, EOFError, ValueError):
        pass
    finally:
        with lock:
            running -= 1
        touch()
        try:
            conn.close()
        except OSError:
            pass


def idle():
    with lock:
        busy = running > 0
    try:
        for name in os.listdir(ACTIVE):
            try:
                os.kill(int(name), 0)
                busy = True
            except (OSError, ValueError):
                try:
                    os.unlink(os.path.join(ACTIVE, name))
                except OSError:
                    pass
    except OSError:
        pass
    if busy:
        touch()
        return False
    try:
        last = os.stat(LAST).st_mtime
    except OSError:
        last = 0
    return time.time() - last >= TTL


def main():
    os.umask(0o077)
    os.makedirs(ACTIVE, exist_ok=True)
    touch()
    server = None
    try:
        if os.path.lexists(SOCK):
            os.unlink(SOCK)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(SOCK)
        server.listen(64)
        server.settimeout(2.0)
    except OSError:
        # Without the socket the session still works through exec.
        server = None
    while True:
        if server is None:
            time.sleep(2.0)
        else:
            try:
                conn, _ = server.accept()
                conn.settimeout(None)
                threading.Thread(target=serve, args=(conn,), daemon=True).start()
                continue
            except socket.timeout:
                pass
            except OSError:
                time.sleep(0.1)
        if idle():
            return


main()
