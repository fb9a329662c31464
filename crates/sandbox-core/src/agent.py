# The main process of a python-sandbox session container: an idle watchdog that also serves
# execs over a unix socket in the container's own /tmp, so a warm `session run` costs a fork
# instead of a round trip through the Docker API (see agent.rs for the client and the wire
# format). It runs as the sandbox user with the container's environment, exactly like an exec:
# it grants nothing the sandboxed code does not already have.
#
# Idle TTL: requests served here and execs registered under /tmp/.active (the exec fallback
# path) count as activity; once nothing ran for the TTL the process exits and the auto-removed
# container disappears, even if no CLI ever runs again.
#
# Exact environment (a second argument `exact-env`, given where the container's own environment is
# not ours to vouch for: a pod's kubelet adds KUBERNETES_* and the pod name as HOSTNAME): a
# command's environment is exactly the request's, nothing of the agent's own. Without it a
# command gets the container's environment with the request's on top.
#
# Interactive execs (protocol version 2, `session exec -i`/`-t`): stdin arrives as frames while
# the command runs, optionally on a pty; see relay_interactive and agent.rs.
#
# Loopback port (an argument `tcp=PORT` after the TTL, given in pods): the same protocol on
# 127.0.0.1:PORT of the sandbox's own network namespace too, which only its own processes and an
# apiserver-authenticated port-forward reach (never another pod: loopback is not routed), so an
# exec from the host costs no process start in the pod (engine-k8s `exec`).
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time

TTL = max(1, int(sys.argv[1]))
EXACT_ENV = sys.argv[2:3] == ["exact-env"]
TCP_PORT = next((int(a[4:]) for a in sys.argv[2:] if a.startswith("tcp=")), None)
SOCK = "/tmp/.python-sandbox-agent.sock"
ACTIVE = "/tmp/.active"
LAST = "/tmp/.last-activity"
HEADER_LIMIT = 16 << 20
# The largest input frame taken from the host, and how much stdin the command may leave
# unread before the host is no longer read (backpressure, not a buffer of everything).
INPUT_LIMIT = 1 << 20

lock = threading.Lock()
running = 0

# The commands this agent started and has not waited for yet: as pid 1 (a pod, see
# pid1_duties) every other zombie child is an orphan of theirs, and ours to reap.
CHILDREN = set()
SPAWN = threading.Lock()


class Child(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        with SPAWN:
            super().__init__(*args, **kwargs)
            CHILDREN.add(self.pid)

    def wait(self, timeout=None):
        code = super().wait(timeout)
        with SPAWN:
            CHILDREN.discard(self.pid)
        return code

    def poll(self):
        code = super().poll()
        if code is not None:
            with SPAWN:
                CHILDREN.discard(self.pid)
        return code


def reap_orphans():
    # Zombies whose parent is us and that no relay waits for: what a command left running when
    # it ended (a daemon, a double fork), reparented here. Once a second, under SPAWN, so a
    # command that just started is in CHILDREN before it can be mistaken for an orphan.
    while True:
        time.sleep(1.0)
        with SPAWN:
            try:
                names = os.listdir("/proc")
            except OSError:
                continue
            for name in names:
                if not name.isdigit() or int(name) in CHILDREN or name == "1":
                    continue
                try:
                    with open("/proc/%s/stat" % name, "rb") as f:
                        stat = f.read()
                    # After "(comm) ": state, ppid.
                    fields = stat[stat.rindex(b")") + 2 :].split()
                    if fields[0] == b"Z" and int(fields[1]) == os.getpid():
                        os.waitpid(int(name), os.WNOHANG)
                except (OSError, ValueError, IndexError):
                    pass


def pid1_duties():
    # The agent is a pod's pid 1 (engine-k8s starts it without tini): the kernel then ignores a
    # SIGSTOP or SIGKILL sent from inside the pod, to every thread of it, so a script that
    # stops everything it may signal (`kill -STOP -1`) cannot stop the agent that reports its
    # end. What tini did is done here: orphans are reaped, SIGTERM (the kubelet's, on delete)
    # ends it, and the process is not dumpable, so a command cannot open /proc/1/mem.
    if os.getpid() != 1:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    threading.Thread(target=reap_orphans, daemon=True).start()


def touch():
    try:
        with open(LAST, "a"):
            pass
        os.utime(LAST)
    except OSError:
        pass


def command_env(req):
    env = {} if EXACT_ENV else dict(os.environ)
    env.update({k: v for k, v in req.get("env", [])})
    return env


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


class Clock:
    # The request's timeout, and how long a command that exited may keep its output open.

    def __init__(self, req):
        timeout = req.get("timeout")
        self.deadline = time.monotonic() + timeout if timeout else None
        self.timed_out = False
        self.exited_at = None

    def tick(self, proc, kill):
        # False once the relay should stop reading; kills the command at its timeout.
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            self.timed_out = True
            kill(proc)
            self.deadline = None
        if self.exited_at is None and proc.poll() is not None:
            self.exited_at = now
        # Like a shell: once the command exited, background children that keep its
        # output open get a moment, not forever.
        return self.exited_at is None or now - self.exited_at <= 0.2

    def wait(self):
        if self.deadline is None:
            return 0.1
        return min(0.1, max(0.0, self.deadline - time.monotonic()))


def relay(conn, req, stdin):
    env = command_env(req)
    try:
        proc = Child(
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
    clock = Clock(req)
    pipes = 2
    try:
        while pipes and clock.tick(proc, kill):
            for key, _ in sel.select(clock.wait()):
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
    send(conn, b"x", json.dumps({"code": code, "timed_out": clock.timed_out}).encode())


def kill_session(proc):
    # The command's whole session: on a tty a shell's job control moves children into
    # process groups of their own, which killpg alone would miss.
    kill(proc)
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
            # After "(comm) ": state, ppid, pgrp, session.
            if int(stat[stat.rindex(b")") + 2 :].split()[3]) == proc.pid:
                os.kill(int(name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass


def winsize(fd, rows, cols):
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    except (OSError, ValueError, struct.error):
        pass


def controlling_tty():
    # In the child, after setsid (start_new_session) and the dup2 of the pty onto 0/1/2. The
    # keys that signal (Ctrl-C, Ctrl-\) must work even if whoever started the agent ignored
    # them (a background job does): an ignored signal stays ignored across exec.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def input_frames(buf):
    # Complete frames off the front of buf; a partial one stays for the next read.
    frames = []
    while len(buf) >= 5:
        (n,) = struct.unpack(">I", bytes(buf[1:5]))
        if n > INPUT_LIMIT:
            raise ValueError("input frame too large")
        if len(buf) < 5 + n:
            break
        frames.append((bytes(buf[0:1]), bytes(buf[5 : 5 + n])))
        del buf[: 5 + n]
    return frames


def relay_interactive(conn, req):
    if req.get("v") != 2:
        send(conn, b"f", b"protocol version %r is not supported" % (req.get("v"),))
        return
    send(conn, b"v", json.dumps({"v": 2}).encode())
    env = command_env(req)
    tty = req.get("tty")
    master = None
    try:
        if tty:
            master, slave = os.openpty()
            winsize(slave, int(tty["rows"]), int(tty["cols"]))
            env.setdefault("TERM", "xterm")
            try:
                proc = Child(
                    req["cmd"],
                    cwd=req.get("cwd") or "/",
                    env=env,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    start_new_session=True,
                    preexec_fn=controlling_tty,
                )
            finally:
                os.close(slave)
            outputs = {master: b"o"}
            sink = os.dup(master)
        else:
            proc = Child(
                req["cmd"],
                cwd=req.get("cwd") or "/",
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            outputs = {proc.stdout.fileno(): b"o", proc.stderr.fileno(): b"e"}
            sink = proc.stdin.fileno()
    except (OSError, ValueError, TypeError, KeyError, subprocess.SubprocessError) as e:
        if master is not None:
            os.close(master)
        send(conn, b"f", str(e).encode())
        return
    os.set_blocking(sink, False)
    sel = selectors.DefaultSelector()
    for fd, kind in outputs.items():
        sel.register(fd, selectors.EVENT_READ, kind)
    sel.register(conn, selectors.EVENT_READ, None)
    inbuf, pending = bytearray(), bytearray()
    eof, sink_open, writing = False, True, False
    clock = Clock(req)
    pipes = len(outputs)
    try:
        while pipes and clock.tick(proc, kill_session):
            if sink_open and eof and not pending:
                if master is None:
                    proc.stdin.close()
                    sink_open = False
                else:
                    # A pty has no end of input to close: type the end-of-file character.
                    pending += b"\x04"
                    eof = False
            want_write = sink_open and bool(pending)
            if want_write != writing:
                if want_write:
                    sel.register(sink, selectors.EVENT_WRITE, b"in")
                else:
                    sel.unregister(sink)
                writing = want_write
            # Backpressure: the host is read again once the command took its stdin.
            want_read = len(pending) < INPUT_LIMIT
            registered = conn in sel.get_map()
            if want_read and not registered:
                sel.register(conn, selectors.EVENT_READ, None)
            elif registered and not want_read:
                sel.unregister(conn)
            for key, _ in sel.select(clock.wait()):
                if key.data is None:
                    chunk = conn.recv(65536)
                    if not chunk:
                        # The client went away (Ctrl-C, killed): so does the command.
                        kill_session(proc)
                        return
                    inbuf += chunk
                    for kind, payload in input_frames(inbuf):
                        if kind == b"i" and not eof:
                            pending += payload
                        elif kind == b"c":
                            eof = True
                        elif kind == b"w" and len(payload) == 4 and master is not None:
                            rows, cols = struct.unpack(">HH", payload)
                            winsize(master, rows, cols)
                elif key.data == b"in":
                    try:
                        del pending[: os.write(sink, pending)]
                    except BlockingIOError:
                        pass
                    except OSError:
                        # The command closed its stdin (or exited): the rest has no reader.
                        pending.clear()
                        eof = False
                        if master is None:
                            sel.unregister(sink)
                            writing = False
                            proc.stdin.close()
                            sink_open = False
                else:
                    try:
                        chunk = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        # EIO: every holder of the pty's other end is gone.
                        chunk = b""
                    if chunk:
                        send(conn, key.data, chunk)
                    else:
                        sel.unregister(key.fileobj)
                        pipes -= 1
    except ValueError:
        kill_session(proc)
        return
    finally:
        sel.close()
        if master is None:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass
        else:
            # Closing the master hangs the terminal up (SIGHUP to the command): only once
            # the command is gone, or one that exits as its output ends would die of it.
            proc.wait()
            for fd in (sink, master):
                try:
                    os.close(fd)
                except OSError:
                    pass
    code = proc.wait()
    if code < 0:
        code = 128 - code
    send(conn, b"x", json.dumps({"code": code, "timed_out": clock.timed_out}).encode())


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
        if "v" in req:
            relay_interactive(conn, req)
            return
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


def listeners():
    out = []
    try:
        if os.path.lexists(SOCK):
            os.unlink(SOCK)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(SOCK)
        server.listen(64)
        out.append(server)
    except OSError:
        # Without the socket the session still works through exec.
        pass
    if TCP_PORT is not None:
        try:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.bind(("127.0.0.1", TCP_PORT))
            server.listen(64)
            out.append(server)
        except OSError:
            # The host falls back to exec when the port-forward finds nothing listening.
            pass
    return out


def main():
    pid1_duties()
    os.umask(0o077)
    os.makedirs(ACTIVE, exist_ok=True)
    touch()
    sel = selectors.DefaultSelector()
    for server in listeners():
        server.setblocking(False)
        sel.register(server, selectors.EVENT_READ)
    while True:
        if not sel.get_map():
            time.sleep(2.0)
        else:
            for key, _ in sel.select(2.0):
                try:
                    conn, _ = key.fileobj.accept()
                except OSError:
                    time.sleep(0.1)
                    continue
                conn.setblocking(True)
                if conn.family == socket.AF_INET:
                    # Frames are small and answered at once: never held back by Nagle.
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                threading.Thread(target=serve, args=(conn,), daemon=True).start()
        if idle():
            return


main()
