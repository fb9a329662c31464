"""The seccomp wall against another syscall ABI: on x86-64, i386 calls (`int 0x80`) and x32
calls (an x86-64 number with bit 30 set) go through other syscall tables, which the wall's rules
were never checked against, so each kills the caller with SIGSYS instead of running. Each is
tried in a forked child, from a few bytes of machine code: `getpid`, which any table would let
through. The native ABI's `getpid` from the same code must work. On aarch64, a 64-bit process
has no way into AArch32's table, so there is nothing to try."""
import ctypes
import mmap
import platform
import signal

if platform.machine() != "x86_64":
    print(f"ok no other ABI is reachable from {platform.machine()}")
    done()
    sys.exit(0)


def call(code):
    """Runs `code` (returns in rax) in a child: ('signal', NAME) or ('returned', VALUE)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(code)
        function = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
        os.write(write_end, str(function()).encode())
        os._exit(0)
    os.close(write_end)
    out = os.read(read_end, 64).decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "signal", signal.Signals(os.WTERMSIG(status)).name
    return "returned", out


# mov eax, NR; int 0x80 | syscall; ret
I386_GETPID = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
X32_GETPID = b"\xb8\x27\x00\x00\x40\x0f\x05\xc3"
NATIVE_GETPID = b"\xb8\x27\x00\x00\x00\x0f\x05\xc3"

how, what = call(NATIVE_GETPID)
require("x86-64 getpid from machine code", how == "returned" and int(what) > 0, f"{how} {what}")
for label, code in (("i386 getpid (int 0x80)", I386_GETPID), ("x32 getpid", X32_GETPID)):
    how, what = call(code)
    expect(f"{label} killed by SIGSYS", (how, what) == ("signal", "SIGSYS"), f"{how} {what}")
done()
