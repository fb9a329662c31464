# /// script
# [tool.python-sandbox]
# tmpfs-size = 1.5
# ///
