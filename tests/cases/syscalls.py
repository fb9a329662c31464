"""One family of the seccomp wall (sandbox_core::FAMILIES): argv is the family's name, then
`SYSCALL=ARCH:NR,ARCH:NR` for each of its syscalls, its number on each architecture that has it
(numbers from the policy itself): the sandbox's own architecture picks (a pod's node need not be
the host's), and the script says which it is.
Each denied call must fail with EPERM and the script go on (ENOSYS is printed as such, and the
runner decides: a container engine's libseccomp may not know a new syscall's name); a syscall without a probe below is
reported, so a syscall added to the policy needs one here. Arguments are chosen so that, without
the wall, the kernel would answer something else (success, EFAULT, EBADF, EINVAL, ENOSYS)
wherever it does not check a capability first. The neighbours a Python program needs still work."""
import ctypes
import errno
import fcntl
import platform
import signal

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def syscall(nr, *args):
    result = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return result, (ctypes.get_errno() if result == -1 else 0)


me = os.getpid()
pidfd = os.pidfd_open(me)
write("f")
fd = os.open("f", os.O_RDONLY)
_keep = []


def cstr(text):
    buf = ctypes.c_char_p(text.encode())
    _keep.append(buf)
    return ctypes.cast(buf, ctypes.c_void_p).value


dot, f, g = cstr("."), cstr("f"), cstr("g")
AT_FDCWD = -100
SUID = 0o4755
O_CREAT_WRONLY = os.O_CREAT | os.O_WRONLY
CLONE_NEWUSER = 0x10000000
CLONE_FS = 0x200  # with CLONE_NEWUSER: EINVAL, so no child even without the wall
S_IFREG = 0o100000

# syscall name -> [(label, args)]; every probe of a syscall must get EPERM.
PROBES = {
    # setid: the same calls without the bits work (tests/cases/setid.py).
    "chmod": [("4755", (f, SUID))],
    "fchmod": [("4755", (fd, SUID))],
    "fchmodat": [("2755", (AT_FDCWD, f, 0o2755, 0))],
    "fchmodat2": [("6755", (AT_FDCWD, f, 0o6755, 0))],
    "creat": [("4755", (g, SUID))],
    "open": [("O_CREAT 4755", (g, O_CREAT_WRONLY, SUID))],
    "openat": [("O_CREAT 2755", (AT_FDCWD, g, O_CREAT_WRONLY, 0o2755))],
    "mknod": [("regular 4755", (g, S_IFREG | SUID, 0))],
    "mknodat": [("regular 4755", (AT_FDCWD, g, S_IFREG | SUID, 0))],
    # userns
    "clone": [("CLONE_NEWUSER", (CLONE_NEWUSER | CLONE_FS, 0, 0, 0, 0))],
    "unshare": [("CLONE_NEWUSER", (CLONE_NEWUSER,))],
    # tty: on a file, so without the wall the kernel would say ENOTTY.
    "ioctl": [("TIOCSTI", (fd, 0x5412, dot)), ("TIOCLINUX", (fd, 0x541C, dot))],
    # ptrace. PTRACE_ATTACH to the sandbox's init would stop it for good (undone below).
    "ptrace": [("attach-init", (16, 1, 0, 0)), ("traceme", (0, 0, 0, 0))],
    "process_vm_readv": [("", (1, 0, 0, 0, 0, 0))],
    "process_vm_writev": [("", (1, 0, 0, 0, 0, 0))],
    "pidfd_getfd": [("", (pidfd, fd, 0))],
    "kcmp": [("", (me, me, 0, fd, fd))],
    "process_madvise": [("", (pidfd, 0, 0, 20, 0))],
    "move_pages": [("", (0, 0, 0, 0, 0, 0))],
    "migrate_pages": [("", (0, 0, 0, 0))],
    # keyring
    "add_key": [("", (0, 0, 0, 0, 0))],
    "request_key": [("", (0, 0, 0, 0))],
    "keyctl": [("", (0, -3, 0, 0, 0))],
    # kernel
    "bpf": [("", (0, 0, 0))],
    "perf_event_open": [("", (0, 0, -1, -1, 0))],
    "userfaultfd": [("user mode only", (1,))],  # UFFD_USER_MODE_ONLY: no privilege needed
    "fanotify_init": [("", (0, 0))],
    # mount
    "mount": [("", (0, 0, 0, 0, 0))],
    "umount": [("", (0,))],
    "umount2": [("", (0, 0))],
    "pivot_root": [("", (0, 0))],
    "setns": [("", (-1, 0))],
    "open_tree": [("", (AT_FDCWD, 0, 0))],
    "open_tree_attr": [("", (AT_FDCWD, 0, 0, 0, 0))],
    "move_mount": [("", (-1, 0, -1, 0, 0))],
    "fsopen": [("", (0, 0))],
    "fsconfig": [("", (-1, 0, 0, 0, 0))],
    "fsmount": [("", (-1, 0, 0))],
    "fspick": [("", (AT_FDCWD, 0, 0))],
    "mount_setattr": [("", (-1, 0, 0, 0, 0))],
    # handles
    "name_to_handle_at": [("", (AT_FDCWD, dot, 0, 0, 0))],
    "open_by_handle_at": [("", (AT_FDCWD, 0, 0))],
    # modules
    "init_module": [("", (0, 0, 0))],
    "finit_module": [("", (-1, 0, 0))],
    "delete_module": [("", (0, 0))],
    "create_module": [("", (0, 0))],
    "query_module": [("", (0, 0, 0, 0, 0))],
    "get_kernel_syms": [("", (0,))],
    "kexec_load": [("", (0, 0, 0, 0))],
    "kexec_file_load": [("", (-1, -1, 0, 0, 0))],
    # host
    "clock_settime": [("", (0, 0))],
    "clock_adjtime": [("", (0, 0))],
    "settimeofday": [("", (0, 0))],
    "stime": [("", (0,))],
    "acct": [("", (0,))],
    "swapon": [("", (0, 0))],
    "swapoff": [("", (0,))],
    "quotactl": [("", (0, 0, 0, 0))],
    "quotactl_fd": [("", (-1, 0, 0, 0))],
    "reboot": [("", (0, 0, 0, 0))],
    "syslog": [("", (10, 0, 0))],
    "ioperm": [("", (0, 0, 0))],
    "iopl": [("", (0,))],
    "lookup_dcookie": [("", (0, 0, 0))],
    "nfsservctl": [("", (0, 0, 0))],
    "sysfs": [("", (3,))],
    "_sysctl": [("", (0,))],
    "uselib": [("", (0,))],
    "ustat": [("", (0, 0))],
    "vm86": [("", (0, 0))],
    "vm86old": [("", (0,))],
    # personality: ADDR_NO_RANDOMIZE (undone below if it went through)
    "personality": [("addr-no-randomize", (0x0040000,))],
}

family, machine = sys.argv[1], platform.machine()
calls = []
for arg in sys.argv[2:]:
    name, numbers = arg.split("=", 1)
    numbers = dict(n.split(":", 1) for n in numbers.split(",") if n)
    if machine in numbers:
        calls.append((name, int(numbers[machine])))
print(f"arch {machine}")
for name, nr in calls:
    probes = PROBES.get(name)
    if probes is None:
        print(f"LEAK {family} {name}: no probe in tests/cases/syscalls.py")
        continue
    bad, nosys = [], 0
    for label, args in probes:
        result, err = syscall(nr, *args)
        if result != -1:
            bad.append(f"{label or name} returned {result}")
            if name == "ptrace":
                syscall(nr, 17, 1, 0, 18)  # PTRACE_DETACH with SIGCONT: leave init running
            if name == "personality":
                syscall(nr, 0)
        elif err == errno.ENOSYS:
            nosys += 1  # refused, by a profile that does not know the call: the runner decides
        elif err != errno.EPERM:
            bad.append(f"{label or name}: errno {err} ({errno.errorcode.get(err, '?')}), not EPERM")
    if bad:
        print(f"LEAK {family} {name}: " + "; ".join(bad))
    elif nosys:
        print(f"ok {family} {name} ENOSYS")
    else:
        print(f"ok {family} {name} EPERM")
print(f"ok {family}: {len(calls)} calls probed, the script went on")


def allowed(label, name, *args, accept=()):
    nr = dict(calls).get(name)
    if nr is None:
        return
    result, err = syscall(int(nr), *args)
    require(label, result != -1 or err in accept, f"errno {err} ({errno.errorcode.get(err, '?')})")


# Neighbours of the family that must keep working.
allowed("personality query", "personality", 0xFFFFFFFF)
allowed("personality PER_LINUX", "personality", 0)
allowed("ioctl TCGETS reaches the kernel", "ioctl", fd, 0x5401, 0, accept=(errno.ENOTTY, errno.EFAULT))
allowed("fchmod 644", "fchmod", fd, 0o644)
allowed("openat O_CREAT 644", "openat", AT_FDCWD, cstr("h"), O_CREAT_WRONLY, 0o644)
if family == "ptrace" and platform.machine() == "x86_64":
    # A process's own memory policy stays allowed (OpenBLAS and libnuma use it). A runtime
    # whose own profile denies it (the runner says so: containerd 1.6's RuntimeDefault on a
    # pod) may answer EPERM, and nothing else.
    runtime_denies = os.environ.get("CONF_RUNTIME_MAY_DENY") == "mempolicy"
    for label, nr, args in (("get_mempolicy", 239, (0, 0, 0, 0, 0)), ("set_mempolicy MPOL_DEFAULT", 238, (0, 0, 0))):
        result, err = syscall(nr, *args)
        if runtime_denies and result == -1 and err == errno.EPERM:
            print(f"note {label}: EPERM from the container runtime's own profile")
            continue
        require(label, result != -1, f"errno {err} ({errno.errorcode.get(err, '?')})")
if family == "ptrace":
    must_work("os.kill(self, 0)", lambda: os.kill(me, 0))
    must_work("pidfd_send_signal 0", lambda: signal.pidfd_send_signal(pidfd, 0))
if family == "tty":
    must_work("fcntl.ioctl FIONREAD on a pipe", lambda: fcntl.ioctl(os.pipe()[0], 0x541B, b"\0" * 4))
done()
