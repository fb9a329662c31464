# /// script
# [tool.python-sandbox]
# publish = [8000, 8001]
# net = "off"
# ///
