"""The seccomp wall's denied families (sandbox_core::WALL): one call of each fails with EPERM on
every engine, the script going on after each, and the neighbours a Python program needs still
work. Arguments are chosen so that, without the wall, the kernel would answer something else
(success, EFAULT, EBADF, ENOSYS) wherever it does not check a capability first. x86_64 numbers."""
import ctypes
import errno
import fcntl
import platform

if platform.machine() != "x86_64":
    print(f"ok skipped: the numbers below are x86_64's, this is {platform.machine()}")
    done()
    sys.exit(0)

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def syscall(nr, *args):
    result = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return result, (ctypes.get_errno() if result == -1 else 0)


def denied(family, label, nr, *args):
    result, err = syscall(nr, *args)
    if result == -1 and err == errno.EPERM:
        print(f"ok {family} {label} EPERM")
    elif result == -1:
        print(f"LEAK {family} {label}: errno {err} ({errno.errorcode.get(err, '?')}), not EPERM")
    else:
        print(f"LEAK {family} {label}: returned {result}")
    return result


def allowed(label, nr, *args, accept=()):
    result, err = syscall(nr, *args)
    require(label, result != -1 or err in accept, f"errno {err} ({errno.errorcode.get(err, '?')})")


me = os.getpid()
pidfd = os.pidfd_open(me)
write("f")
fd = os.open("f", os.O_RDONLY)
dot = ctypes.c_char_p(b".")
ptr = ctypes.cast(dot, ctypes.c_void_p).value
AT_FDCWD = -100

# Other processes. PTRACE_ATTACH to the sandbox's init would stop it for good.
if denied("ptrace", "attach-init", 101, 16, 1, 0, 0) == 0:
    syscall(101, 17, 1, 0, 18)  # PTRACE_DETACH with SIGCONT: leave init running
denied("ptrace", "traceme", 101, 0, 0, 0, 0)
denied("ptrace", "process_vm_readv", 310, 1, 0, 0, 0, 0, 0)
denied("ptrace", "process_vm_writev", 311, 1, 0, 0, 0, 0, 0)
denied("ptrace", "pidfd_getfd", 438, pidfd, fd, 0)
denied("ptrace", "kcmp", 312, me, me, 0, fd, fd)
denied("ptrace", "process_madvise", 440, pidfd, 0, 0, 20, 0)
denied("ptrace", "move_pages", 279, 0, 0, 0, 0, 0, 0)
denied("ptrace", "migrate_pages", 256, 0, 0, 0, 0)
# The kernel keyring (not namespaced).
denied("keyring", "add_key", 248, 0, 0, 0, 0, 0)
denied("keyring", "request_key", 249, 0, 0, 0, 0)
denied("keyring", "keyctl", 250, 0, -3, 0, 0, 0)
# Kernel attack surface.
denied("kernel", "bpf", 321, 0, 0, 0)
denied("kernel", "perf_event_open", 298, 0, 0, -1, -1, 0)
denied("kernel", "userfaultfd", 323, 1)  # UFFD_USER_MODE_ONLY: no privilege needed
denied("kernel", "fanotify_init", 300, 0, 0)
# Mounts and namespaces.
denied("mount", "mount", 165, 0, 0, 0, 0, 0)
denied("mount", "umount2", 166, 0, 0)
denied("mount", "pivot_root", 155, 0, 0)
denied("mount", "setns", 308, -1, 0)
denied("mount", "open_tree", 428, AT_FDCWD, 0, 0)
denied("mount", "move_mount", 429, -1, 0, -1, 0, 0)
denied("mount", "fsopen", 430, 0, 0)
denied("mount", "fsconfig", 431, -1, 0, 0, 0, 0)
denied("mount", "fsmount", 432, -1, 0, 0)
denied("mount", "fspick", 433, AT_FDCWD, 0, 0)
denied("mount", "mount_setattr", 442, -1, 0, 0, 0, 0)
denied("mount", "unshare-user", 272, 0x10000000)
# File handles.
denied("handles", "name_to_handle_at", 303, AT_FDCWD, ptr, 0, 0, 0)
denied("handles", "open_by_handle_at", 304, AT_FDCWD, 0, 0)
# Modules and kexec.
denied("modules", "init_module", 175, 0, 0, 0)
denied("modules", "finit_module", 313, -1, 0, 0)
denied("modules", "delete_module", 176, 0, 0)
denied("modules", "create_module", 174, 0, 0)
denied("modules", "query_module", 178, 0, 0, 0, 0, 0)
denied("modules", "get_kernel_syms", 177, 0)
denied("modules", "kexec_load", 246, 0, 0, 0, 0)
denied("modules", "kexec_file_load", 320, -1, -1, 0, 0, 0)
# The machine's own state.
denied("host", "clock_settime", 227, 0, 0)
denied("host", "clock_adjtime", 305, 0, 0)
denied("host", "settimeofday", 164, 0, 0)
denied("host", "acct", 163, 0)
denied("host", "swapon", 167, 0, 0)
denied("host", "swapoff", 168, 0)
denied("host", "quotactl", 179, 0, 0, 0, 0)
denied("host", "quotactl_fd", 443, -1, 0, 0, 0)
denied("host", "reboot", 169, 0, 0, 0, 0)
denied("host", "syslog", 103, 10, 0, 0)
denied("host", "ioperm", 173, 0, 0, 0)
denied("host", "iopl", 172, 0)
denied("host", "lookup_dcookie", 212, 0, 0, 0)
denied("host", "nfsservctl", 180, 0, 0, 0)
denied("host", "sysfs", 139, 3)
denied("host", "_sysctl", 156, 0)
denied("host", "uselib", 134, 0)
denied("host", "ustat", 136, 0, 0)
ADDR_NO_RANDOMIZE = 0x0040000
if denied("personality", "addr-no-randomize", 135, ADDR_NO_RANDOMIZE) != -1:
    syscall(135, 0)
# Terminal injection, on a file: without the wall the kernel would say ENOTTY.
denied("tty", "tiocsti", 16, fd, 0x5412, ptr)
denied("tty", "tioclinux", 16, fd, 0x541C, ptr)

# Neighbours that must keep working.
allowed("personality query", 135, 0xFFFFFFFF)
allowed("personality PER_LINUX", 135, 0)
allowed("ioctl TCGETS reaches the kernel", 16, fd, 0x5401, 0, accept=(errno.ENOTTY, errno.EFAULT))
allowed("get_mempolicy", 239, 0, 0, 0, 0, 0)
allowed("set_mempolicy MPOL_DEFAULT", 238, 0, 0, 0)
allowed("kill self 0", 62, me, 0)
allowed("pidfd_send_signal 0", 424, pidfd, 0, 0, 0)
must_work("fcntl.ioctl FIONREAD on a pipe", lambda: fcntl.ioctl(os.pipe()[0], 0x541B, b"\0" * 4))
done()
