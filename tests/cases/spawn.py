"""Spawns a detached grandchild (own session, so a process-group kill misses it) carrying the case's
marker in its argv; the runner checks on the host that nothing with the marker survives the run.
With `hang` the script then sleeps past its timeout."""
import subprocess
import time

child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(300)", CTX["child_marker"]],
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    start_new_session=True,
)
time.sleep(0.3)
require("detached child alive", child.poll() is None, f"exited with {child.returncode}")
if sys.argv[1:] == ["hang"]:
    print("sleeping")
    time.sleep(60)
    print("BROKEN timeout: still running after 60 s")
done()
