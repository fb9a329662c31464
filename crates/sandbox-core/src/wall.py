# Prepended to a program that runs inside a pod (`sandbox_core::agent::walled`): takes
# python-sandbox's seccomp wall (`sandbox_core::WALL`, compiled to classic BPF by the engine)
# before anything else runs, so the program and everything it starts are under the one wall
# every engine applies. A pod's own seccomp profile is the node's RuntimeDefault; a Localhost
# profile would need a file on every node, a filter taken here needs nothing there.
#
# argv[1] is `ARCH=HEX;ARCH=HEX`, one program per architecture the engine compiled (the node's
# is not known when the pod is written); it is taken out of argv so the program sees its own
# arguments. Any failure ends the process with 125 before the program starts: never unwalled.
import ctypes as _ctypes
import os as _os
import sys as _sys


def _take_wall(spec):
    programs = dict(part.split("=", 1) for part in spec.split(";") if "=" in part)
    machine = _os.uname().machine
    program = programs.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine))
    if program is None:
        raise OSError("no wall for this machine's architecture %s (compiled for %s)"
                      % (machine, ", ".join(sorted(programs)) or "none"))
    code = bytes.fromhex(program)
    if not code or len(code) % 8:
        raise OSError("the wall for %s is not a BPF program" % machine)
    libc = _ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [_ctypes.c_int] + [_ctypes.c_ulong] * 4
    libc.prctl.restype = _ctypes.c_int

    class _Fprog(_ctypes.Structure):
        _fields_ = [("len", _ctypes.c_ushort), ("filter", _ctypes.c_void_p)]

    buf = _ctypes.create_string_buffer(code, len(code))
    prog = _Fprog(len(code) // 8, _ctypes.cast(buf, _ctypes.c_void_p))
    # PR_SET_NO_NEW_PRIVS (the pod's allowPrivilegeEscalation=false set it already), then
    # PR_SET_SECCOMP with SECCOMP_MODE_FILTER: no thread exists yet, so the filter covers the
    # whole process and is inherited by every child.
    for option, arg in ((38, 1), (22, 2)):
        value = _ctypes.addressof(prog) if option == 22 else 0
        if libc.prctl(option, arg, value, 0, 0) != 0:
            errno = _ctypes.get_errno()
            raise OSError(errno, "prctl(%d): %s" % (option, _os.strerror(errno)))


try:
    _take_wall(_sys.argv.pop(1) if len(_sys.argv) > 1 else "")
except Exception as _e:
    _sys.stderr.write("python-sandbox: cannot take the seccomp wall, so nothing runs: %s\n" % _e)
    _sys.stderr.flush()
    _os._exit(125)
del _take_wall
