"""The interpreter, the environment and the tools are shown at fixed paths that say nothing of
the caller's home (on native and bwrap they are relocated below /opt/python-sandbox), and an
interpreter's own site-packages outside the system's is hidden: the sandbox sees what it runs."""
import site

allowed = (CTX["workspace"], "/usr", "/opt/python-sandbox", "/home/sandbox", "/tmp", "/bin", "/lib", "/sbin")
seen = [sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
seen += [p for p in sys.path if p]
for name in ("PATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "PYTHONHOME"):
    seen += [p for p in os.environ.get(name, "").split(":") if p]
for path in seen:
    expect(f"{path} is a sandbox path", path.startswith(allowed), f"{path} is outside {allowed}")
try:
    root = os.listdir("/root")
except OSError:  # absent, or an image's own unreadable /root
    root = []
expect("no /root to list", root == [], f"/root lists {sorted(root)[:10]}")
if sys.base_prefix.startswith("/opt/python-sandbox"):
    base_site = [p for p in site.getsitepackages([sys.base_prefix]) if os.path.isdir(p)]
    for p in base_site:
        expect(f"{p} is empty", os.listdir(p) == [], f"{p} lists {sorted(os.listdir(p))[:10]}")
done()
