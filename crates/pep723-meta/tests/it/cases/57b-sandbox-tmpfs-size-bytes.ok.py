# /// script
# [tool.python-sandbox]
# tmpfs-size = 1073741824
# ///
