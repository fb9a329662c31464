# /// script
# [tool]
# python-sandbox = 1
# ///
