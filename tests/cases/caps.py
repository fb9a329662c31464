"""No capabilities, no new privileges, no nested user namespaces, no mounts (srt/Codex cases 9, 12, 13).
Every dangerous call runs in a forked child, so one that wrongly succeeds cannot taint the next."""
import ctypes

status = {}
for line in read("/proc/self/status").decode().splitlines():
    key, _, value = line.partition(":")
    status[key] = value.strip()
for key in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
    expect(f"{key} is zero", int(status.get(key, "1"), 16) == 0, status.get(key))
expect("NoNewPrivs is 1", status.get("NoNewPrivs") == "1", status.get("NoNewPrivs"))
print(f"info: CapBnd={status.get('CapBnd')} Seccomp={status.get('Seccomp')} uid={os.getuid()}")

try:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    libc = ctypes.CDLL(None, use_errno=True)


def call(fn, *args):
    if fn(*args) == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return "returned 0"


def in_child(fn):
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        except OSError as e:
            os._exit(100 + (e.errno or 0) % 100)
        except BaseException:
            os._exit(99)
        os._exit(0)
    _, wait_status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else -1
    if code == 0:
        return "succeeded"
    raise OSError(code - 100 if code >= 100 else 0, f"failed in the child (exit {code})")


CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MNT_DETACH = 2
must_fail("unshare(CLONE_NEWUSER)", lambda: in_child(lambda: call(libc.unshare, CLONE_NEWUSER)))
must_fail("unshare(CLONE_NEWUSER|CLONE_NEWNS)",
          lambda: in_child(lambda: call(libc.unshare, CLONE_NEWUSER | CLONE_NEWNS)))
must_fail("unshare(CLONE_NEWNS)", lambda: in_child(lambda: call(libc.unshare, CLONE_NEWNS)))
if hasattr(os, "unshare"):
    must_fail("os.unshare(CLONE_NEWUSER)", lambda: in_child(lambda: os.unshare(CLONE_NEWUSER)))
must_fail("mount tmpfs on /tmp",
          lambda: in_child(lambda: call(libc.mount, b"none", b"/tmp", b"tmpfs", 0, None)))
must_fail("mount tmpfs on cwd",
          lambda: in_child(lambda: call(libc.mount, b"none", os.getcwd().encode(), b"tmpfs", 0, None)))
must_fail("umount2 /proc", lambda: in_child(lambda: call(libc.umount2, b"/proc", MNT_DETACH)))


def setns_pid1():
    fd = os.open("/proc/1/ns/mnt", os.O_RDONLY)
    return call(libc.setns, fd, 0)


must_fail("setns into pid 1's mount namespace", lambda: in_child(setns_pid1))
done()
