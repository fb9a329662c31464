# /// script
# [tool.python-sandbox]
# net = true
# ///
