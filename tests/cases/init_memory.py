"""The sandbox's init reaps the script and so ends the run; it runs as the script's user, so its
memory files must not open for writing (a script that rewrote init's code through them would
keep the run from ever ending). Reading them must fail too or show nothing."""
for path in ("/proc/1/mem", "/proc/1/task/1/mem"):
    must_fail(f"open {path} for writing", lambda path=path: os.close(os.open(path, os.O_RDWR)))
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        print(f"ok read {path}: errno={e.errno}")
    else:
        start = int(read("/proc/1/syscall").split()[-1], 16) if os.path.exists("/proc/1/syscall") else 0
        try:
            data = os.pread(fd, 16, start)
        except OSError as e:
            data = f"errno={e.errno}"
        expect(f"read {path} shows nothing", data == b"" or isinstance(data, str), repr(data))
        os.close(fd)
done()
