# /// script
# [tool.ruff]
# line-length = 100
# ///
