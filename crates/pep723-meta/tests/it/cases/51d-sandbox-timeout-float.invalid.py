# /// script
# [tool.python-sandbox]
# timeout = 2.5
# ///
