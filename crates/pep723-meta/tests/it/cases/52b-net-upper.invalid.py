# /// script
# [tool.python-sandbox]
# net = "OFF"
# ///
