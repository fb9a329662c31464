# ---- conformance prelude: spliced in by tests/conformance after the metadata block ----
# Cases print one line per check: `ok LABEL`, `LEAK LABEL: ...` (an isolation wall let something
# through) or `BROKEN LABEL: ...` (something the sandbox must allow failed), then `DONE`. The runner
# fails a case on any LEAK/BROKEN line, so a script keeps going after a failed check and reports all.
import json
import os
import socket
import sys

sys.stdout.reconfigure(line_buffering=True)

with open(".conformance.json", encoding="utf-8") as _ctx_file:
    CTX = json.load(_ctx_file)


def _short(value):
    text = repr(value)
    return text if len(text) <= 300 else text[:300] + "..."


def must_fail(label, fn):
    """An isolation check: `fn` must raise OSError; success means the wall has a hole."""
    try:
        result = fn()
    except OSError as e:
        print(f"ok {label}: {type(e).__name__} errno={e.errno}")
        return
    print(f"LEAK {label}: succeeded with {_short(result)}")


def must_work(label, fn):
    """Something the sandbox must allow; returns fn's result, or None after printing BROKEN."""
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - any failure is reported, not raised
        print(f"BROKEN {label}: {type(e).__name__}: {e}")
        return None
    print(f"ok {label}")
    return result


def expect(label, condition, detail=""):
    print(f"ok {label}" if condition else f"LEAK {label}: {detail}")


def require(label, condition, detail=""):
    print(f"ok {label}" if condition else f"BROKEN {label}: {detail}")


def hidden(label, path):
    """A directory that must be absent, unreadable or empty."""
    try:
        entries = os.listdir(path)
    except OSError as e:
        print(f"ok {label}: {type(e).__name__}")
        return
    expect(label, entries == [], f"{path} lists {sorted(entries)[:20]}")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data=b"conformance\n"):
    with open(path, "wb") as f:
        f.write(data)
    return path


def connect_unix(path, timeout=3.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
    finally:
        s.close()
    return "connected"


def connect_tcp(host, port, timeout=3.0):
    with socket.create_connection((host, port), timeout=timeout):
        return "connected"


def attempt(fn):
    """`connected`/`resolved`/... or `failed (Error)`: for facts the runner matches per engine."""
    try:
        return fn()
    except OSError as e:
        return f"failed ({type(e).__name__} errno={e.errno})"


def host_addresses():
    """`failed`, or which of the host's own addresses (a docker bridge's, its LAN address) a
    connect to the runner's listener reached: a bridge or pasta would carry it to the host."""
    port = CTX["tcp_port"]
    reached = [ip for ip in CTX["host_addresses"] if attempt(lambda: connect_tcp(ip, port)) == "connected"]
    return f"connected {reached}" if reached else "failed"


def done():
    print("DONE")


# ---- end of prelude ----
