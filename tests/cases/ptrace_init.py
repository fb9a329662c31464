"""A script that tries to stop everything around it and exits: PTRACE_ATTACH to the sandbox's
init (which would leave it stopped, and the run hanging, once its tracer is gone), SIGSTOP to
init (ignored by a pid namespace's init, or refused by Landlock's signal scope) and to every other
process it may signal. The run must still end when the script does."""
import ctypes
import errno
import platform
import signal

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
for label, request in (("attach", PTRACE_ATTACH), ("seize", PTRACE_SEIZE)):
    result = libc.ptrace(ctypes.c_long(request), ctypes.c_long(1), None, None)
    err = ctypes.get_errno()
    expect(f"ptrace {label} init", result == -1 and err == errno.EPERM, f"returned {result}, errno {err}")
print(f"info: {platform.machine()}")
try:
    os.kill(1, signal.SIGSTOP)
except PermissionError:
    pass  # Landlock's signal scope (native): init is outside the script's domain
print("ok SIGSTOP to init did not stop this script")
try:
    os.kill(-1, signal.SIGSTOP)
except (ProcessLookupError, PermissionError):
    pass  # nobody else to signal
print("ok stopped everything else")
done()
