# /// script
# [tool.python-sandbox]
# publish = ["8000", 0, -1, 70000, 8000.0]
# ///
