# /// script
# [tool.python-sandbox]
# timeout = 5
# ///
