"""Runs a command on a new pseudo-terminal, as its controlling terminal, and reports the
terminal's modes after the command ended: `echo=on|off icanon=on|off isig=on|off`, then
`status=N` (or `signal=N`).

usage: pty_modes.py HOW COMMAND...

HOW is what ends the run once the command printed `ready`: `wait` (nothing: it ends by
itself), `sigterm` or `sighup` (sent to the command), `ctrl-c` (typed on the terminal).
The terminal starts with echo, canonical input and signals on. Used by the CLI's tests of
item 16: a script that turns echo off must not leave the caller's terminal that way.
"""
import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time

how, argv = sys.argv[1], sys.argv[2:]
master, slave = pty.openpty()
attrs = termios.tcgetattr(slave)
attrs[3] |= termios.ECHO | termios.ICANON | termios.ISIG
termios.tcsetattr(slave, termios.TCSANOW, attrs)


def controlling_terminal():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


child = subprocess.Popen(
    argv, stdin=slave, stdout=slave, stderr=slave, preexec_fn=controlling_terminal
)
output = b""
acted = False
deadline = time.monotonic() + 180
while True:
    ready, _, _ = select.select([master], [], [], 0.1)
    if ready:
        try:
            output += os.read(master, 65536)
        except OSError:
            pass
    if not acted and b"ready" in output:
        acted = True
        if how == "sigterm":
            child.send_signal(signal.SIGTERM)
        elif how == "sighup":
            child.send_signal(signal.SIGHUP)
        elif how == "ctrl-c":
            os.write(master, b"\x03")
    if child.poll() is not None and not ready:
        break
    if time.monotonic() > deadline:
        child.kill()
        child.wait()
        print("timed out waiting for the command")
        break

lflag = termios.tcgetattr(slave)[3]
flags = {"echo": termios.ECHO, "icanon": termios.ICANON, "isig": termios.ISIG}
print(" ".join(f"{name}={'on' if lflag & bit else 'off'}" for name, bit in flags.items()))
code = child.returncode
print(f"status={code}" if code >= 0 else f"signal={-code}")
sys.stdout.flush()
sys.stderr.write(output.decode(errors="replace"))
