# /// script
# [tool.python-sandbox]
# memory = "none"
# cpus = "none"
# pids-limit = "none"
# ///
