# /// script
# [tool.python-sandbox]
# net = "maybe"
# ///
