# /// script
# [tool.python-sandbox]
# net = ["https://pypi.org/simple", 443, "*", "*.com", "pypi.org:0", "ok.example"]
# ///
