# /// script
# dependencies = ["requests"]
# [tool.python-sandbox]
# net = ["pypi.org", "*.githubusercontent.com:443", "10.1.2.3:5432", "[fd00::1]:8080"]
# ///
