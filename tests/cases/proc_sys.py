"""Kernel knobs stay out of reach: /proc/sys (core_pattern runs a program as root on a crash) and
/proc/sysrq-trigger are not writable. Only opened for writing, never written: a hole must not
reboot the host."""
for path in ("/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger"):
    must_fail(f"open {path} for writing", lambda: os.close(os.open(path, os.O_WRONLY)))
done()
