# /// script
# [tool.python-sandbox]
# memory = "1k"
# cpus = 0
# pids-limit = "many"
# ///
