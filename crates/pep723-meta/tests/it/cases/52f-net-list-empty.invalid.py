# /// script
# [tool.python-sandbox]
# net = []
# ///
