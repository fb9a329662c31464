"""Sleeps for argv[1] seconds, then finishes."""
import time

time.sleep(float(sys.argv[1]))
done()
