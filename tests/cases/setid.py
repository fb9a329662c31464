"""The seccomp wall: no setuid or setgid file can be made, because it would leave the sandbox
through the workspace (a root caller would find it owned by the sandbox's host uid). Every way of
setting the bits fails with EPERM; the same calls without them work."""
import errno


def refused(label, fn, code=errno.EPERM):
    try:
        fn()
    except OSError as e:
        expect(label, e.errno == code, f"errno {e.errno}, not {code}")
        return
    print(f"LEAK {label}: succeeded")


write("f")
fd = os.open("f", os.O_RDONLY)
for mode in (0o4755, 0o2755, 0o6755):
    refused(f"chmod {mode:o}", lambda: os.chmod("f", mode))
    refused(f"fchmod {mode:o}", lambda: os.fchmod(fd, mode))
    refused(f"fchmodat {mode:o}", lambda: os.chmod("f", mode, dir_fd=os.open(".", os.O_RDONLY)))
refused("open O_CREAT 4755", lambda: os.close(os.open("g", os.O_CREAT | os.O_WRONLY, 0o4755)))
refused("open O_CREAT 2700", lambda: os.close(os.open("g", os.O_CREAT | os.O_WRONLY, 0o2700)))
refused("mkfifo 4644", lambda: os.mkfifo("q", 0o4644))
must_work("chmod 755", lambda: os.chmod("f", 0o755))
must_work("fchmod 1777 (sticky is fine)", lambda: os.fchmod(fd, 0o1777))
must_work("fchmod 644", lambda: os.fchmod(fd, 0o644))
must_work("open O_CREAT 644", lambda: os.close(os.open("h", os.O_CREAT | os.O_WRONLY, 0o644)))
for root, dirs, files in os.walk("."):
    for name in dirs + files:
        mode = os.lstat(os.path.join(root, name)).st_mode
        expect(f"{name} has no setuid/setgid bit", mode & 0o6000 == 0, oct(mode))
done()
