# /// script
# [tool.python-sandbox]
# memory = "256m"
# cpus = 0.5
# pids-limit = 64
# ///
