# /// script
# [tool.python-sandbox]
# tmpfs-size = "512m"
# ///
