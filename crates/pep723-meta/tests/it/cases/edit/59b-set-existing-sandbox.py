# /// script
# [tool.python-sandbox]
# net = "on"  # needed for the api
# publish = [8000]
# ///
