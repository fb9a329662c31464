# /// script
# dependencies = ["a"]
# dependency = ["b"]
#
# [tool.python-sandbox]
# net = "off"
# nett = "on"
# ///
