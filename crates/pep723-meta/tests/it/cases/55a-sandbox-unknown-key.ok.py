# /// script
# [tool.python-sandbox]
# mount = ["/data"]
# ///
