# /// script
# [tool.python-sandbox]
# publish = [8000]
# ///
