# /// script
# [tool.python-sandbox]
# tmpfs-size = 0
# ///
